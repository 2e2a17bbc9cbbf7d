// The Python bindings of every kernel, their argument checks, and the max-pool kernels.
//
// Each compressor makes one pass over the map: DIVISION works per (sample, channel) plane, ActNN-style
// per group of values, the masks per byte, each plane or group held in a small per-thread buffer
// (it fits the cache) between its steps. Maps are read and written in their own dtype (float32,
// float16, bfloat16); arithmetic is float32, in the same operations and order as the
// pure-torch reference (membench/division/compress.py), which the kernels match bit for bit.
// The CPU compressors (division_cpu_isa.h) are built once per instruction set and picked at run time.
//
// Bit layout: row g holds `length` values; with `bits` bits per value, values_per_byte = 8 / bits
// and value j of a row lives in byte j / values_per_byte at bit offset (j % values_per_byte) * bits.
// Rows are padded to whole bytes. Masks use the same layout with bits = 1 over the flattened tensor.

// The bindings include torch's Python headers; the kernels' translation units do not (see
// division_cpu_kernels.h), so the slow part of the build is one file among four that compile side by side.
#include <torch/csrc/utils/pybind.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "division_common.h"
#include "division_cpu_kernels.h"

#ifdef WITH_CUDA
std::vector<at::Tensor> division_compress_cuda(at::Tensor x, int64_t block, int64_t bits, int64_t seed,
                                               int64_t offset);
at::Tensor division_decompress_cuda(at::Tensor lfc, at::Tensor packed, at::Tensor minimum, at::Tensor scale,
                                    int64_t block, int64_t bits, int64_t height, int64_t width,
                                    at::ScalarType dtype);
std::vector<at::Tensor> group_compress_cuda(at::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
                                            int64_t offset);
at::Tensor group_decompress_cuda(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t group_size,
                                 int64_t bits, int64_t numel, at::ScalarType dtype);
std::vector<at::Tensor> relu_pack_cuda(at::Tensor x);
std::vector<at::Tensor> dropout_pack_cuda(at::Tensor x, double p, int64_t seed, int64_t offset);
at::Tensor masked_grad_cuda(at::Tensor grad_out, at::Tensor packed, double gain);
std::vector<at::Tensor> maxpool2d_forward_cuda(at::Tensor x, int64_t kernel, int64_t stride, int64_t padding);
at::Tensor maxpool2d_backward_cuda(at::Tensor grad_out, at::Tensor index, int64_t height, int64_t width,
                                   int64_t kernel, int64_t stride, int64_t padding);
#endif

namespace {

// The instruction sets the CPU kernels are built for, best first, and whether this CPU has each.
struct CpuIsa {
  const char* name;
  bool supported;
  const membench::CpuKernels& (*kernels)();
};

std::vector<CpuIsa> cpu_isas() {
  std::vector<CpuIsa> isas;
#ifdef MEMBENCH_X86_DISPATCH
  __builtin_cpu_init();
  const bool fma_bmi2 = __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  isas.push_back({"avx512",
                  __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && fma_bmi2,
                  &membench::cpu_avx512::kernels});
  isas.push_back({"avx2", __builtin_cpu_supports("avx2") && fma_bmi2, &membench::cpu_avx2::kernels});
#endif
  isas.push_back({"baseline", true, &membench::cpu_baseline::kernels});
  return isas;
}

// The CPU kernels of the best instruction set this CPU has, picked once; MEMBENCH_CPU_ISA
// (avx512, avx2, baseline) asks for one, so that tests check every set a machine can run.
const CpuIsa& cpu_isa_used() {
  static const CpuIsa used = [] {
    const std::vector<CpuIsa> isas = cpu_isas();
    const char* wanted = std::getenv("MEMBENCH_CPU_ISA");
    if (wanted == nullptr || *wanted == '\0') {
      for (const CpuIsa& isa : isas) {
        if (isa.supported) return isa;
      }
    }
    std::string names, supported;
    for (const CpuIsa& isa : isas) {
      names += (names.empty() ? "" : ", ") + std::string(isa.name);
      if (isa.supported) supported += (supported.empty() ? "" : ", ") + std::string(isa.name);
    }
    for (const CpuIsa& isa : isas) {
      if (std::string(isa.name) == wanted) {
        TORCH_CHECK(isa.supported, "MEMBENCH_CPU_ISA: this CPU lacks ", wanted, " (it has ", supported, ")");
        return isa;
      }
    }
    TORCH_CHECK(false, "MEMBENCH_CPU_ISA: '", wanted, "' is not an instruction set of this build (", names, ")");
    return isas.back();
  }();
  return used;
}

const membench::CpuKernels& cpu_kernels() { return cpu_isa_used().kernels(); }

std::string cpu_isa() { return cpu_isa_used().name; }

// The dtypes of maps: float32, float16, bfloat16.
#define MEMBENCH_DISPATCH_MAP_TYPES(TYPE, NAME, ...)                                    \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)             \
                                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)          \
                                         AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

void check_bits(int64_t bits) {
  TORCH_CHECK(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits must be 1, 2, 4 or 8, got ", bits);
}

using membench::packed_row_bytes;

int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  return (size + 2 * padding - kernel) / stride + 1;
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

// Returns whether every index names a value of the plane (else those gradients are left out).
template <typename scalar_t>
bool maxpool2d_backward_cpu_kernel(const scalar_t* grad_out, const int8_t* index, int64_t planes, int64_t height,
                                   int64_t width, int64_t out_h, int64_t out_w, int64_t kernel, int64_t stride,
                                   int64_t padding, scalar_t* grad_in) {
  std::atomic<bool> outside{false};
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t o = 0; o < out_h * out_w; ++o) {
        const int64_t oh = o / out_w, ow = o % out_w, k = index[p * out_h * out_w + o];
        const int64_t ih = oh * stride - padding + k / kernel, iw = ow * stride - padding + k % kernel;
        if (k < 0 || k >= kernel * kernel || ih < 0 || ih >= height || iw < 0 || iw >= width) {
          outside = true;
          continue;
        }
        grad_in[(p * height + ih) * width + iw] += grad_out[p * out_h * out_w + o];
      }
    }
  });
  return !outside;
}

// -- argument checks shared by both devices -------------------------------------------------------

bool map_type(at::ScalarType type) {
  return type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
}

void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK(map_type(t.scalar_type()), name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
}

void check_grid(const at::Tensor& minimum, const at::Tensor& scale, int64_t rows) {
  TORCH_CHECK(minimum.scalar_type() == at::kBFloat16 && scale.scalar_type() == at::kBFloat16,
              "minimum and scale must be bfloat16");
  TORCH_CHECK(minimum.numel() == rows && scale.numel() == rows, "minimum and scale need one value per row (",
              rows, "), got ", minimum.numel(), " and ", scale.numel());
}

void check_rows(int64_t rows, int64_t length) {
  TORCH_CHECK(rows <= (int64_t{1} << 32) && (length + 7) / 8 <= (int64_t{1} << 32),
              "the noise counter holds at most 2^32 rows of 2^35 values");
}

// DIVISION's block and a map's plane: the tiles of membench::lfc_tile divide by them.
void check_plane(int64_t block, int64_t height, int64_t width) {
  TORCH_CHECK(block >= 1, "block must be positive, got ", block);
  TORCH_CHECK(height >= 1 && width >= 1, "maps must have a positive height and width, got ", height, "x", width);
}

// A max-pool window whose int8 index holds every position, over `height` x `width` planes it fits.
void check_window(int64_t height, int64_t width, int64_t kernel, int64_t stride, int64_t padding) {
  TORCH_CHECK(kernel >= 1 && stride >= 1 && padding >= 0,
              "kernel and stride must be positive and padding not negative, got kernel ", kernel, ", stride ",
              stride, ", padding ", padding);
  TORCH_CHECK(kernel <= 11, "window too large for an int8 index, got kernel ", kernel);
  TORCH_CHECK(padding * 2 <= kernel, "padding must be at most half the kernel");
  TORCH_CHECK(height >= 1 && width >= 1 && height + 2 * padding >= kernel && width + 2 * padding >= kernel,
              "a ", height, "x", width, " map is smaller than the window (kernel ", kernel, ", padding ", padding, ")");
}

void check_same_device(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "tensors must be on one device, got ", a.device(), " and ", b.device());
}

}  // namespace

std::vector<at::Tensor> division_compress(at::Tensor x, int64_t block, int64_t bits, int64_t seed,
                                          int64_t offset) {
  check_bits(bits);
  check_floating(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be a 4-D map (N, C, H, W)");
  x = x.contiguous();
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  check_plane(block, height, width);
  check_rows(planes, height * width);
#ifdef WITH_CUDA
  if (x.is_cuda()) return division_compress_cuda(x, block, bits, seed, offset);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  const auto bf16 = x.options().dtype(at::kBFloat16);
  auto lfc = at::empty({x.size(0), x.size(1), (height + tile_h - 1) / tile_h, (width + tile_w - 1) / tile_w}, bf16);
  auto packed = at::empty({planes, packed_row_bytes(height * width, bits)}, x.options().dtype(at::kByte));
  auto minimum = at::empty({planes}, bf16);
  auto scale = at::empty({planes}, bf16);
  if (planes == 0 || height * width == 0) return {lfc, packed, minimum, scale};
  cpu_kernels().division_compress(x.scalar_type(), static_cast<int>(bits), x.const_data_ptr(), planes, height, width,
                                  block, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset),
                                  lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(),
                                  minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>());
  return {lfc, packed, minimum, scale};
}

at::Tensor division_decompress(at::Tensor lfc, at::Tensor packed, at::Tensor minimum, at::Tensor scale,
                               int64_t block, int64_t bits, int64_t height, int64_t width, at::ScalarType dtype) {
  check_bits(bits);
  TORCH_CHECK(map_type(dtype), "dtype must be float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(lfc.dim() == 4 && lfc.scalar_type() == at::kBFloat16, "lfc must be a 4-D bfloat16 tensor");
  check_plane(block, height, width);
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  TORCH_CHECK(lfc.size(2) == (height + tile_h - 1) / tile_h && lfc.size(3) == (width + tile_w - 1) / tile_w,
              "lfc size does not match the map and block");
  const int64_t planes = lfc.size(0) * lfc.size(1);
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.size(0) == planes &&
                  packed.size(1) == packed_row_bytes(height * width, bits),
              "packed must be uint8 (planes, packed row bytes)");
  check_grid(minimum, scale, planes);
  check_same_device(lfc, packed);
  lfc = lfc.contiguous(); packed = packed.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (packed.is_cuda()) return division_decompress_cuda(lfc, packed, minimum, scale, block, bits, height, width, dtype);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  auto out = at::empty({lfc.size(0), lfc.size(1), height, width}, packed.options().dtype(dtype));
  if (out.numel() == 0) return out;
  cpu_kernels().division_decompress(dtype, static_cast<int>(bits), lfc.const_data_ptr<c10::BFloat16>(),
                                    packed.const_data_ptr<uint8_t>(), minimum.const_data_ptr<c10::BFloat16>(),
                                    scale.const_data_ptr<c10::BFloat16>(), planes, height, width, block,
                                    out.data_ptr());
  return out;
}

std::vector<at::Tensor> group_compress(at::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
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
  const auto bf16 = x.options().dtype(at::kBFloat16);
  auto packed = at::empty({groups, packed_row_bytes(group_size, bits)}, x.options().dtype(at::kByte));
  auto minimum = at::empty({groups}, bf16);
  auto scale = at::empty({groups}, bf16);
  if (groups == 0) return {packed, minimum, scale};
  cpu_kernels().group_compress(x.scalar_type(), static_cast<int>(bits), x.const_data_ptr(), numel, group_size, groups,
                               static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), packed.data_ptr<uint8_t>(),
                               minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>());
  return {packed, minimum, scale};
}

at::Tensor group_decompress(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t group_size,
                            int64_t bits, at::IntArrayRef shape, at::ScalarType dtype) {
  check_bits(bits);
  TORCH_CHECK(map_type(dtype), "dtype must be float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(group_size >= 1, "group_size must be positive");
  const int64_t numel = c10::multiply_integers(shape), groups = (numel + group_size - 1) / group_size;
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.size(0) == groups &&
                  packed.size(1) == packed_row_bytes(group_size, bits),
              "packed must be uint8 (groups, packed group bytes)");
  check_grid(minimum, scale, groups);
  packed = packed.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (packed.is_cuda()) return group_decompress_cuda(packed, minimum, scale, group_size, bits, numel, dtype).view(shape);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  auto out = at::empty(shape, packed.options().dtype(dtype));
  if (numel == 0) return out;
  cpu_kernels().group_decompress(dtype, static_cast<int>(bits), packed.const_data_ptr<uint8_t>(),
                                 minimum.const_data_ptr<c10::BFloat16>(), scale.const_data_ptr<c10::BFloat16>(), numel,
                                 group_size, groups, out.data_ptr());
  return out;
}

std::vector<at::Tensor> relu_pack(at::Tensor x) {
  check_floating(x, "x");
  x = x.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return relu_pack_cuda(x);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  auto out = at::empty_like(x);
  auto packed = at::empty({(x.numel() + 7) / 8}, x.options().dtype(at::kByte));
  if (x.numel() == 0) return {out, packed};
  cpu_kernels().relu_pack(x.scalar_type(), x.const_data_ptr(), x.numel(), out.data_ptr(), packed.data_ptr<uint8_t>());
  return {out, packed};
}

std::vector<at::Tensor> dropout_pack(at::Tensor x, double p, int64_t seed, int64_t offset) {
  check_floating(x, "x");
  TORCH_CHECK(p >= 0.0 && p < 1.0, "p must be in [0, 1), got ", p);
  x = x.contiguous();
  check_rows(1, x.numel());
#ifdef WITH_CUDA
  if (x.is_cuda()) return dropout_pack_cuda(x, p, seed, offset);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  auto out = at::empty_like(x);
  auto packed = at::empty({(x.numel() + 7) / 8}, x.options().dtype(at::kByte));
  if (x.numel() == 0) return {out, packed};
  cpu_kernels().dropout_pack(x.scalar_type(), x.const_data_ptr(), x.numel(), static_cast<float>(p),
                             static_cast<float>(1.0 / (1.0 - p)), static_cast<uint64_t>(seed),
                             static_cast<uint64_t>(offset), out.data_ptr(), packed.data_ptr<uint8_t>());
  return {out, packed};
}

at::Tensor masked_grad(at::Tensor grad_out, at::Tensor packed, double gain) {
  check_floating(grad_out, "grad_out");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.numel() == (grad_out.numel() + 7) / 8,
              "packed mask size does not match grad_out");
  check_same_device(grad_out, packed);
  grad_out = grad_out.contiguous();
  packed = packed.contiguous().view({-1});
#ifdef WITH_CUDA
  if (grad_out.is_cuda()) return masked_grad_cuda(grad_out, packed, gain);
#endif
  TORCH_CHECK(grad_out.is_cpu(), "this build has no CUDA kernels");
  auto grad_in = at::empty_like(grad_out);
  if (grad_out.numel() == 0) return grad_in;
  cpu_kernels().masked_grad(grad_out.scalar_type(), grad_out.const_data_ptr(), packed.const_data_ptr<uint8_t>(),
                            grad_out.numel(), static_cast<float>(gain), grad_in.data_ptr());
  return grad_in;
}

std::vector<at::Tensor> maxpool2d_forward(at::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  check_floating(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be a 4-D map (N, C, H, W)");
  check_window(x.size(2), x.size(3), kernel, stride, padding);
  x = x.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return maxpool2d_forward_cuda(x, kernel, stride, padding);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = pooled_size(height, kernel, stride, padding), out_w = pooled_size(width, kernel, stride, padding);
  auto out = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  auto index = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options().dtype(at::kChar));
  if (out.numel() == 0) return {out, index};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "maxpool2d_forward", [&] {
    maxpool2d_forward_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), planes, height, width, out_h, out_w, kernel,
                                           stride, padding, out.data_ptr<scalar_t>(), index.data_ptr<int8_t>());
  });
  return {out, index};
}

at::Tensor maxpool2d_backward(at::Tensor grad_out, at::Tensor index, int64_t height, int64_t width,
                              int64_t kernel, int64_t stride, int64_t padding) {
  check_floating(grad_out, "grad_out");
  TORCH_CHECK(grad_out.dim() == 4, "grad_out must be 4-D (N, C, Ho, Wo)");
  TORCH_CHECK(grad_out.sizes() == index.sizes() && index.scalar_type() == at::kChar, "index must match grad_out");
  check_window(height, width, kernel, stride, padding);
  TORCH_CHECK(grad_out.size(2) == pooled_size(height, kernel, stride, padding) &&
                  grad_out.size(3) == pooled_size(width, kernel, stride, padding),
              "grad_out (", grad_out.size(2), "x", grad_out.size(3), ") is not the pooled size of a ", height, "x",
              width, " map");
  check_same_device(grad_out, index);
  grad_out = grad_out.contiguous(); index = index.contiguous();
#ifdef WITH_CUDA
  if (grad_out.is_cuda()) return maxpool2d_backward_cuda(grad_out, index, height, width, kernel, stride, padding);
#endif
  TORCH_CHECK(grad_out.is_cpu(), "this build has no CUDA kernels");
  const int64_t planes = grad_out.size(0) * grad_out.size(1), out_h = grad_out.size(2), out_w = grad_out.size(3);
  auto grad_in = at::zeros({grad_out.size(0), grad_out.size(1), height, width}, grad_out.options());
  if (grad_out.numel() == 0) return grad_in;
  bool inside = true;
  MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "maxpool2d_backward", [&] {
    inside = maxpool2d_backward_cpu_kernel<scalar_t>(grad_out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(), planes,
                                                     height, width, out_h, out_w, kernel, stride, padding,
                                                     grad_in.data_ptr<scalar_t>());
  });
  TORCH_CHECK(inside, "index names positions outside the window or the map (not maxpool2d_forward's)");
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
  m.def("cpu_isa", &cpu_isa, "the instruction set of the CPU kernels: avx512, avx2 or baseline");
}
