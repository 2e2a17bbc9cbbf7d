// CPU kernels of the activation compressors, and the Python bindings of every kernel.
//
// Each kernel makes one pass over the map: DIVISION works per (sample, channel) plane, ActNN-style
// per group of values, the masks per byte, each plane or group held in a small per-thread buffer
// (it fits the cache) between its steps. Maps are read and written in their own dtype (float32,
// float16, bfloat16); arithmetic is float32, in the same operations and order as the
// pure-torch reference (membench/division/compress.py), which the kernels match bit for bit.
// Work is split over torch's intra-op threads (at::parallel_for), so the caller's thread count holds.
//
// Bit layout: row g holds `length` values; with `bits` bits per value, values_per_byte = 8 / bits
// and value j of a row lives in byte j / values_per_byte at bit offset (j % values_per_byte) * bits.
// Rows are padded to whole bytes. Masks use the same layout with bits = 1 over the flattened tensor.

#include <torch/extension.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "division_common.h"  // before division_cpu.h, which uses it

#ifdef WITH_CUDA
std::vector<torch::Tensor> division_compress_cuda(torch::Tensor x, int64_t block, int64_t bits, int64_t seed,
                                                  int64_t offset);
torch::Tensor division_decompress_cuda(torch::Tensor lfc, torch::Tensor packed, torch::Tensor minimum,
                                       torch::Tensor scale, int64_t block, int64_t bits, int64_t height,
                                       int64_t width, at::ScalarType dtype);
std::vector<torch::Tensor> group_compress_cuda(torch::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
                                               int64_t offset);
torch::Tensor group_decompress_cuda(torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale,
                                    int64_t group_size, int64_t bits, int64_t numel, at::ScalarType dtype);
std::vector<torch::Tensor> relu_pack_cuda(torch::Tensor x);
std::vector<torch::Tensor> dropout_pack_cuda(torch::Tensor x, double p, int64_t seed, int64_t offset);
torch::Tensor masked_grad_cuda(torch::Tensor grad_out, torch::Tensor packed, double gain);
std::vector<torch::Tensor> maxpool2d_forward_cuda(torch::Tensor x, int64_t kernel, int64_t stride, int64_t padding);
torch::Tensor maxpool2d_backward_cuda(torch::Tensor grad_out, torch::Tensor index, int64_t height, int64_t width,
                                      int64_t kernel, int64_t stride, int64_t padding);
#endif

// The per-plane, per-group and per-chunk work (division_cpu.h), compiled for the baseline
// instruction set and, on x86-64 with GCC, for AVX2 and AVX-512; cpu_isa() picks at run time.
#define MEMBENCH_CPU_ISA 0
namespace cpu_baseline {
#include "division_cpu.h"
}  // namespace cpu_baseline
#undef MEMBENCH_CPU_ISA

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MEMBENCH_X86_DISPATCH 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2")
#define MEMBENCH_CPU_ISA 1
namespace cpu_avx2 {
#include "division_cpu.h"
}  // namespace cpu_avx2
#undef MEMBENCH_CPU_ISA
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2")
#define MEMBENCH_CPU_ISA 2
namespace cpu_avx512 {
#include "division_cpu.h"
}  // namespace cpu_avx512
#undef MEMBENCH_CPU_ISA
#pragma GCC pop_options
#endif

namespace {

enum class Isa { baseline, avx2, avx512 };

Isa cpu_isa() {
  static const Isa isa = [] {
#ifdef MEMBENCH_X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("bmi2")) {
      return Isa::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
      return Isa::avx2;
    }
#endif
    return Isa::baseline;
  }();
  return isa;
}

// The build of a function for this CPU: MEMBENCH_PICK(name<args>).
template <typename F>
F pick(F baseline, F avx2, F avx512) {
  switch (cpu_isa()) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    default: return baseline;
  }
}
#ifdef MEMBENCH_X86_DISPATCH
#define MEMBENCH_PICK(...) pick(&cpu_baseline::__VA_ARGS__, &cpu_avx2::__VA_ARGS__, &cpu_avx512::__VA_ARGS__)
#else
#define MEMBENCH_PICK(...) (&cpu_baseline::__VA_ARGS__)
#endif

constexpr int64_t kChunk = cpu_baseline::kChunk;

// The dtypes of maps: float32, float16, bfloat16.
#define MEMBENCH_DISPATCH_MAP_TYPES(TYPE, NAME, ...)                                    \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)             \
                                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)          \
                                         AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

void check_bits(int64_t bits) {
  TORCH_CHECK(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits must be 1, 2, 4 or 8, got ", bits);
}

// Calls f(std::integral_constant<int, bits>()), so that the bit width is a compile-time constant.
template <typename F>
void dispatch_bits(int64_t bits, F&& f) {
  check_bits(bits);
  switch (bits) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    default: f(std::integral_constant<int, 8>()); break;
  }
}

int64_t packed_row_bytes(int64_t length, int64_t bits) {
  const int64_t per_byte = 8 / bits;
  return (length + per_byte - 1) / per_byte;
}

int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

// -- DIVISION: one task per (sample, channel) plane ------------------------------------------------

template <typename scalar_t, int BITS>
void division_compress_cpu_kernel(const scalar_t* x, int64_t planes, int64_t height, int64_t width, int64_t block,
                                  uint64_t seed, uint64_t offset, c10::BFloat16* lfc, uint8_t* packed,
                                  c10::BFloat16* minimum, c10::BFloat16* scale) {
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  const int64_t lfc_size = ((height + tile_h - 1) / tile_h) * ((width + tile_w - 1) / tile_w);
  const int64_t area = height * width, row_bytes = packed_row_bytes(area, BITS);
  const auto plane_fn = MEMBENCH_PICK(division_compress_plane<scalar_t, BITS>);
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> column(width), lfc_row(width), hfc(area);
    for (int64_t p = begin; p < end; ++p) {
      plane_fn(x + p * area, height, width, tile_h, tile_w, seed, offset, static_cast<uint32_t>(p), column.data(),
               lfc_row.data(), hfc.data(), lfc + p * lfc_size, packed + p * row_bytes, minimum + p, scale + p);
    }
  });
}

template <typename scalar_t, int BITS>
void division_decompress_cpu_kernel(const c10::BFloat16* lfc, const uint8_t* packed, const c10::BFloat16* minimum,
                                    const c10::BFloat16* scale, int64_t planes, int64_t height, int64_t width,
                                    int64_t block, scalar_t* out) {
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  const int64_t lfc_size = ((height + tile_h - 1) / tile_h) * ((width + tile_w - 1) / tile_w);
  const int64_t area = height * width, row_bytes = packed_row_bytes(area, BITS);
  const auto plane_fn = MEMBENCH_PICK(division_decompress_plane<scalar_t, BITS>);
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> lfc_row(width);
    std::vector<uint8_t> level(row_bytes * (8 / BITS));
    for (int64_t p = begin; p < end; ++p) {
      plane_fn(lfc + p * lfc_size, packed + p * row_bytes, minimum[p], scale[p], height, width, tile_h, tile_w,
               lfc_row.data(), level.data(), out + p * area);
    }
  });
}

// -- ActNN-style: one task per group of values -----------------------------------------------------

template <typename scalar_t, int BITS>
void group_compress_cpu_kernel(const scalar_t* x, int64_t numel, int64_t group_size, int64_t groups, uint64_t seed,
                               uint64_t offset, uint8_t* packed, c10::BFloat16* minimum, c10::BFloat16* scale) {
  const int64_t row_bytes = packed_row_bytes(group_size, BITS);
  const auto group_fn = MEMBENCH_PICK(group_compress_group<scalar_t, BITS>);
  at::parallel_for(0, groups, std::max<int64_t>(1, 16384 / group_size), [&](int64_t begin, int64_t end) {
    std::vector<float> values(group_size);
    for (int64_t g = begin; g < end; ++g) {
      const int64_t base = g * group_size;
      group_fn(x + base, std::min(group_size, numel - base), group_size, seed, offset, static_cast<uint32_t>(g),
               values.data(), packed + g * row_bytes, minimum + g, scale + g);
    }
  });
}

template <typename scalar_t, int BITS>
void group_decompress_cpu_kernel(const uint8_t* packed, const c10::BFloat16* minimum, const c10::BFloat16* scale,
                                 int64_t numel, int64_t group_size, int64_t groups, scalar_t* out) {
  const int64_t row_bytes = packed_row_bytes(group_size, BITS);
  const auto group_fn = MEMBENCH_PICK(group_decompress_group<scalar_t, BITS>);
  at::parallel_for(0, groups, std::max<int64_t>(1, 16384 / group_size), [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> level(row_bytes * (8 / BITS));
    for (int64_t g = begin; g < end; ++g) {
      const int64_t base = g * group_size;
      group_fn(packed + g * row_bytes, minimum[g], scale[g], std::min(group_size, numel - base), level.data(),
               out + base);
    }
  });
}

// -- 1-bit masks: one task per chunk of kChunk values ----------------------------------------------

template <typename scalar_t>
void relu_pack_cpu_kernel(const scalar_t* x, int64_t numel, scalar_t* out, uint8_t* packed) {
  const auto chunk_fn = MEMBENCH_PICK(relu_pack_chunk<scalar_t>);
  at::parallel_for(0, (numel + kChunk - 1) / kChunk, 16, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      chunk_fn(x + first, std::min(kChunk, numel - first), out + first, packed + first / 8);
    }
  });
}

template <typename scalar_t>
void dropout_pack_cpu_kernel(const scalar_t* x, int64_t numel, float p, float gain, uint64_t seed, uint64_t offset,
                             scalar_t* out, uint8_t* packed) {
  const auto chunk_fn = MEMBENCH_PICK(dropout_pack_chunk<scalar_t>);
  at::parallel_for(0, (numel + kChunk - 1) / kChunk, 16, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      chunk_fn(x + first, std::min(kChunk, numel - first), p, gain, seed, offset, static_cast<uint32_t>(first / membench::kNoiseBlock), out + first, packed + first / 8);
    }
  });
}

template <typename scalar_t>
void masked_grad_cpu_kernel(const scalar_t* grad_out, const uint8_t* packed, int64_t numel, float gain,
                            scalar_t* grad_in) {
  const auto chunk_fn = MEMBENCH_PICK(masked_grad_chunk<scalar_t>);
  at::parallel_for(0, (numel + kChunk - 1) / kChunk, 16, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      chunk_fn(grad_out + first, packed + first / 8, std::min(kChunk, numel - first), gain, grad_in + first);
    }
  });
}

// -- max pooling with window indices --------------------------------------------------------------

template <typename scalar_t>
void maxpool2d_forward_cpu_kernel(const scalar_t* x, int64_t planes, int64_t height, int64_t width, int64_t out_h,
                                  int64_t out_w, int64_t kernel, int64_t stride, int64_t padding, scalar_t* out,
                                  int8_t* index) {
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const scalar_t* plane = x + p * height * width;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          scalar_t best = plane[0];
          float best_value = -INFINITY;
          int best_index = -1;
          for (int64_t kh = 0; kh < kernel; ++kh) {
            const int64_t ih = oh * stride - padding + kh;
            if (ih < 0 || ih >= height) continue;
            for (int64_t kw = 0; kw < kernel; ++kw) {
              const int64_t iw = ow * stride - padding + kw;
              if (iw < 0 || iw >= width) continue;
              const float value = static_cast<float>(plane[ih * width + iw]);
              // The first maximum in scan order wins and NaN propagates, as in torch's max_pool2d.
              if (best_index < 0 || value > best_value || std::isnan(value)) {
                best = plane[ih * width + iw];
                best_value = value;
                best_index = static_cast<int>(kh * kernel + kw);
              }
            }
          }
          const int64_t o = (p * out_h + oh) * out_w + ow;
          out[o] = best;
          index[o] = static_cast<int8_t>(best_index);
        }
      }
    }
  });
}

template <typename scalar_t>
void maxpool2d_backward_cpu_kernel(const scalar_t* grad_out, const int8_t* index, int64_t planes, int64_t height,
                                   int64_t width, int64_t out_h, int64_t out_w, int64_t kernel, int64_t stride,
                                   int64_t padding, scalar_t* grad_in) {
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t o = 0; o < out_h * out_w; ++o) {
        const int64_t oh = o / out_w, ow = o % out_w, k = index[p * out_h * out_w + o];
        const int64_t ih = oh * stride - padding + k / kernel, iw = ow * stride - padding + k % kernel;
        grad_in[(p * height + ih) * width + iw] += grad_out[p * out_h * out_w + o];
      }
    }
  });
}

// -- argument checks shared by both devices -------------------------------------------------------

bool map_type(at::ScalarType type) {
  return type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
}

void check_floating(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(map_type(t.scalar_type()), name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
}

void check_grid(const torch::Tensor& minimum, const torch::Tensor& scale, int64_t rows) {
  TORCH_CHECK(minimum.scalar_type() == torch::kBFloat16 && scale.scalar_type() == torch::kBFloat16,
              "minimum and scale must be bfloat16");
  TORCH_CHECK(minimum.numel() == rows && scale.numel() == rows, "minimum and scale need one value per row (",
              rows, "), got ", minimum.numel(), " and ", scale.numel());
}

void check_rows(int64_t rows, int64_t length) {
  TORCH_CHECK(rows <= (int64_t{1} << 32) && (length + 7) / 8 <= (int64_t{1} << 32),
              "the noise counter holds at most 2^32 rows of 2^35 values");
}

void check_same_device(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "tensors must be on one device, got ", a.device(), " and ", b.device());
}

}  // namespace

std::vector<torch::Tensor> division_compress(torch::Tensor x, int64_t block, int64_t bits, int64_t seed,
                                             int64_t offset) {
  check_bits(bits);
  check_floating(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be a 4-D map (N, C, H, W)");
  TORCH_CHECK(block >= 1, "block must be positive");
  x = x.contiguous();
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  check_rows(planes, height * width);
#ifdef WITH_CUDA
  if (x.is_cuda()) return division_compress_cuda(x, block, bits, seed, offset);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  const auto bf16 = x.options().dtype(torch::kBFloat16);
  auto lfc = torch::empty({x.size(0), x.size(1), (height + tile_h - 1) / tile_h, (width + tile_w - 1) / tile_w}, bf16);
  auto packed = torch::empty({planes, packed_row_bytes(height * width, bits)}, x.options().dtype(torch::kUInt8));
  auto minimum = torch::empty({planes}, bf16);
  auto scale = torch::empty({planes}, bf16);
  if (planes == 0 || height * width == 0) return {lfc, packed, minimum, scale};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "division_compress", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      division_compress_cpu_kernel<scalar_t, decltype(bits_constant)::value>(
          x.data_ptr<scalar_t>(), planes, height, width, block, static_cast<uint64_t>(seed),
          static_cast<uint64_t>(offset), lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(),
          minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>());
    });
  });
  return {lfc, packed, minimum, scale};
}

torch::Tensor division_decompress(torch::Tensor lfc, torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale,
                                  int64_t block, int64_t bits, int64_t height, int64_t width, at::ScalarType dtype) {
  check_bits(bits);
  TORCH_CHECK(map_type(dtype), "dtype must be float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(lfc.dim() == 4 && lfc.scalar_type() == torch::kBFloat16, "lfc must be a 4-D bfloat16 tensor");
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  TORCH_CHECK(lfc.size(2) == (height + tile_h - 1) / tile_h && lfc.size(3) == (width + tile_w - 1) / tile_w,
              "lfc size does not match the map and block");
  const int64_t planes = lfc.size(0) * lfc.size(1);
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8 && packed.size(0) == planes &&
                  packed.size(1) == packed_row_bytes(height * width, bits),
              "packed must be uint8 (planes, packed row bytes)");
  check_grid(minimum, scale, planes);
  check_same_device(lfc, packed);
  lfc = lfc.contiguous(); packed = packed.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (packed.is_cuda()) return division_decompress_cuda(lfc, packed, minimum, scale, block, bits, height, width, dtype);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  auto out = torch::empty({lfc.size(0), lfc.size(1), height, width}, packed.options().dtype(dtype));
  if (out.numel() == 0) return out;
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "division_decompress", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      division_decompress_cpu_kernel<scalar_t, decltype(bits_constant)::value>(
          lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
          scale.data_ptr<c10::BFloat16>(), planes, height, width, block, out.data_ptr<scalar_t>());
    });
  });
  return out;
}

std::vector<torch::Tensor> group_compress(torch::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
                                          int64_t offset) {
  check_bits(bits);
  check_floating(x, "x");
  TORCH_CHECK(group_size >= 1, "group_size must be positive");
  x = x.contiguous();
  const int64_t numel = x.numel(), groups = (numel + group_size - 1) / group_size;
  check_rows(groups, group_size);
#ifdef WITH_CUDA
  if (x.is_cuda()) return group_compress_cuda(x, group_size, bits, seed, offset);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  const auto bf16 = x.options().dtype(torch::kBFloat16);
  auto packed = torch::empty({groups, packed_row_bytes(group_size, bits)}, x.options().dtype(torch::kUInt8));
  auto minimum = torch::empty({groups}, bf16);
  auto scale = torch::empty({groups}, bf16);
  if (groups == 0) return {packed, minimum, scale};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "group_compress", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      group_compress_cpu_kernel<scalar_t, decltype(bits_constant)::value>(
          x.data_ptr<scalar_t>(), numel, group_size, groups, static_cast<uint64_t>(seed),
          static_cast<uint64_t>(offset), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
          scale.data_ptr<c10::BFloat16>());
    });
  });
  return {packed, minimum, scale};
}

torch::Tensor group_decompress(torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale, int64_t group_size,
                               int64_t bits, at::IntArrayRef shape, at::ScalarType dtype) {
  check_bits(bits);
  TORCH_CHECK(map_type(dtype), "dtype must be float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(group_size >= 1, "group_size must be positive");
  const int64_t numel = c10::multiply_integers(shape), groups = (numel + group_size - 1) / group_size;
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8 && packed.size(0) == groups &&
                  packed.size(1) == packed_row_bytes(group_size, bits),
              "packed must be uint8 (groups, packed group bytes)");
  check_grid(minimum, scale, groups);
  packed = packed.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (packed.is_cuda()) return group_decompress_cuda(packed, minimum, scale, group_size, bits, numel, dtype).view(shape);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  auto out = torch::empty(shape, packed.options().dtype(dtype));
  if (numel == 0) return out;
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "group_decompress", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      group_decompress_cpu_kernel<scalar_t, decltype(bits_constant)::value>(
          packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>(), numel,
          group_size, groups, out.data_ptr<scalar_t>());
    });
  });
  return out;
}

std::vector<torch::Tensor> relu_pack(torch::Tensor x) {
  check_floating(x, "x");
  x = x.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return relu_pack_cuda(x);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  auto out = torch::empty_like(x);
  auto packed = torch::empty({(x.numel() + 7) / 8}, x.options().dtype(torch::kUInt8));
  if (x.numel() == 0) return {out, packed};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "relu_pack", [&] {
    relu_pack_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), x.numel(), out.data_ptr<scalar_t>(),
                                   packed.data_ptr<uint8_t>());
  });
  return {out, packed};
}

std::vector<torch::Tensor> dropout_pack(torch::Tensor x, double p, int64_t seed, int64_t offset) {
  check_floating(x, "x");
  TORCH_CHECK(p >= 0.0 && p < 1.0, "p must be in [0, 1), got ", p);
  x = x.contiguous();
  check_rows(1, x.numel());
#ifdef WITH_CUDA
  if (x.is_cuda()) return dropout_pack_cuda(x, p, seed, offset);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  auto out = torch::empty_like(x);
  auto packed = torch::empty({(x.numel() + 7) / 8}, x.options().dtype(torch::kUInt8));
  if (x.numel() == 0) return {out, packed};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "dropout_pack", [&] {
    dropout_pack_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), x.numel(), static_cast<float>(p),
                                      static_cast<float>(1.0 / (1.0 - p)), static_cast<uint64_t>(seed),
                                      static_cast<uint64_t>(offset), out.data_ptr<scalar_t>(),
                                      packed.data_ptr<uint8_t>());
  });
  return {out, packed};
}

torch::Tensor masked_grad(torch::Tensor grad_out, torch::Tensor packed, double gain) {
  check_floating(grad_out, "grad_out");
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.numel() == (grad_out.numel() + 7) / 8,
              "packed mask size does not match grad_out");
  check_same_device(grad_out, packed);
  grad_out = grad_out.contiguous();
  packed = packed.contiguous().view({-1});
#ifdef WITH_CUDA
  if (grad_out.is_cuda()) return masked_grad_cuda(grad_out, packed, gain);
#endif
  TORCH_CHECK(grad_out.is_cpu(), "this build has no CUDA kernels");
  auto grad_in = torch::empty_like(grad_out);
  if (grad_out.numel() == 0) return grad_in;
  MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "masked_grad", [&] {
    masked_grad_cpu_kernel<scalar_t>(grad_out.data_ptr<scalar_t>(), packed.data_ptr<uint8_t>(), grad_out.numel(),
                                     static_cast<float>(gain), grad_in.data_ptr<scalar_t>());
  });
  return grad_in;
}

std::vector<torch::Tensor> maxpool2d_forward(torch::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  check_floating(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be a 4-D map (N, C, H, W)");
  TORCH_CHECK(kernel * kernel <= 127, "window too large for an int8 index");
  TORCH_CHECK(padding * 2 <= kernel, "padding must be at most half the kernel");
  x = x.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return maxpool2d_forward_cuda(x, kernel, stride, padding);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = pooled_size(height, kernel, stride, padding), out_w = pooled_size(width, kernel, stride, padding);
  auto out = torch::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  auto index = torch::empty({x.size(0), x.size(1), out_h, out_w}, x.options().dtype(torch::kInt8));
  if (out.numel() == 0) return {out, index};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "maxpool2d_forward", [&] {
    maxpool2d_forward_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), planes, height, width, out_h, out_w, kernel,
                                           stride, padding, out.data_ptr<scalar_t>(), index.data_ptr<int8_t>());
  });
  return {out, index};
}

torch::Tensor maxpool2d_backward(torch::Tensor grad_out, torch::Tensor index, int64_t height, int64_t width,
                                 int64_t kernel, int64_t stride, int64_t padding) {
  check_floating(grad_out, "grad_out");
  TORCH_CHECK(grad_out.dim() == 4, "grad_out must be 4-D (N, C, Ho, Wo)");
  TORCH_CHECK(grad_out.sizes() == index.sizes() && index.scalar_type() == torch::kInt8, "index must match grad_out");
  check_same_device(grad_out, index);
  grad_out = grad_out.contiguous(); index = index.contiguous();
#ifdef WITH_CUDA
  if (grad_out.is_cuda()) return maxpool2d_backward_cuda(grad_out, index, height, width, kernel, stride, padding);
#endif
  TORCH_CHECK(grad_out.is_cpu(), "this build has no CUDA kernels");
  const int64_t planes = grad_out.size(0) * grad_out.size(1), out_h = grad_out.size(2), out_w = grad_out.size(3);
  auto grad_in = torch::zeros({grad_out.size(0), grad_out.size(1), height, width}, grad_out.options());
  if (grad_out.numel() == 0) return grad_in;
  MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "maxpool2d_backward", [&] {
    maxpool2d_backward_cpu_kernel<scalar_t>(grad_out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(), planes, height,
                                            width, out_h, out_w, kernel, stride, padding,
                                            grad_in.data_ptr<scalar_t>());
  });
  return grad_in;
}

bool has_cuda_kernels() {
#ifdef WITH_CUDA
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "membench DIVISION kernels: fused DIVISION and ActNN-style compression with Philox stochastic "
            "rounding, 1-bit ReLU and dropout masks, max-pool window indices";
  m.def("division_compress", &division_compress, "DIVISION-compress a 4-D map: (lfc, packed, minimum, scale)");
  m.def("division_decompress", &division_decompress, "DIVISION-decompress into a map of dtype");
  m.def("group_compress", &group_compress, "ActNN-style group compression: (packed, minimum, scale)");
  m.def("group_decompress", &group_decompress, "ActNN-style group decompression into a map of shape and dtype");
  m.def("relu_pack", &relu_pack, "ReLU and its packed mask");
  m.def("dropout_pack", &dropout_pack, "Philox dropout and its packed mask");
  m.def("masked_grad", &masked_grad, "gradient through a packed mask times a gain");
  m.def("maxpool2d_forward", &maxpool2d_forward, "max pool returning int8 window indices");
  m.def("maxpool2d_backward", &maxpool2d_backward, "max pool gradient from int8 window indices");
  m.def("has_cuda_kernels", &has_cuda_kernels, "whether this build holds CUDA kernels");
}
