// One instruction set's CPU kernels (the table of division_cpu_kernels.h), included once by each of
// division_cpu_{baseline,avx2,avx512}.cpp with MEMBENCH_CPU_ISA set (0: the baseline, 1: AVX2,
// 2: AVX-512). The per-plane, per-group and per-chunk work (division_cpu.h) is compiled for that
// set in a `#pragma GCC target` region; everything from other headers, and the loops that split the
// work over torch's intra-op threads (at::parallel_for, so the caller's thread count holds), are
// compiled outside it, so no function shared between translation units is built for a set the CPU
// may lack. No include guard, on purpose.

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "division_common.h"  // before division_cpu.h, which uses it
#include "division_cpu_kernels.h"

#if MEMBENCH_CPU_ISA == 0
#define MEMBENCH_CPU_NAMESPACE cpu_baseline
#elif MEMBENCH_CPU_ISA == 1
#define MEMBENCH_CPU_NAMESPACE cpu_avx2
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2")
#elif MEMBENCH_CPU_ISA == 2
#define MEMBENCH_CPU_NAMESPACE cpu_avx512
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2")
#endif

namespace membench::MEMBENCH_CPU_NAMESPACE {
#include "division_cpu.h"
}  // namespace membench::MEMBENCH_CPU_NAMESPACE

#if MEMBENCH_CPU_ISA > 0
#pragma GCC pop_options
#endif

namespace membench::MEMBENCH_CPU_NAMESPACE {
namespace {

// Calls f(scalar_t()) with the map type of `dtype` (float32, float16, bfloat16; checked by the caller).
template <typename F>
void dispatch_map_type(c10::ScalarType dtype, F&& f) {
  switch (dtype) {
    case c10::ScalarType::Float: f(float()); break;
    case c10::ScalarType::Half: f(c10::Half()); break;
    case c10::ScalarType::BFloat16: f(c10::BFloat16()); break;
    default: TORCH_CHECK(false, "maps must be float32, float16 or bfloat16, got ", dtype);
  }
}

// Calls f(std::integral_constant<int, bits>()), so that the bit width is a compile-time constant.
template <typename F>
void dispatch_bits(int bits, F&& f) {
  switch (bits) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    default: TORCH_CHECK(false, "bits must be 1, 2, 4 or 8, got ", bits);
  }
}

// Floats in a buffer of n values that the kernels read a whole vector at a time.
int64_t whole_vectors(int64_t n) { return (n + 15) / 16 * 16; }

// -- DIVISION: one task per (sample, channel) plane ------------------------------------------------

// A plane's LFC tiles, and the values of its LFC, its map and its packed HFC.
struct PlaneLayout {
  int64_t tile_h, tile_w, lfc_size, area, row_bytes;
};

PlaneLayout plane_layout(int64_t height, int64_t width, int64_t block, int bits) {
  PlaneLayout layout;
  membench::lfc_tile(height, width, block, layout.tile_h, layout.tile_w);
  layout.lfc_size = ((height + layout.tile_h - 1) / layout.tile_h) * ((width + layout.tile_w - 1) / layout.tile_w);
  layout.area = height * width;
  layout.row_bytes = packed_row_bytes(layout.area, bits);
  return layout;
}

void division_compress(c10::ScalarType dtype, int bits, const void* x, int64_t planes, int64_t height, int64_t width,
                       int64_t block, uint64_t seed, uint64_t offset, c10::BFloat16* lfc, uint8_t* packed,
                       c10::BFloat16* minimum, c10::BFloat16* scale) {
  const PlaneLayout layout = plane_layout(height, width, block, bits);
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    const auto* map = static_cast<const scalar_t*>(x);
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int BITS = decltype(bits_constant)::value;
      at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
        RowNoise noise(seed, offset, layout.area);
        if (layout.lfc_size == 1 && layout.area <= kShortPlaneValues) {
          for (int64_t p = begin; p < end; p += kPlaneLanes) {
            division_compress_short_planes<scalar_t, BITS>(map, p, std::min<int64_t>(kPlaneLanes, end - p), height,
                                                           width, noise, lfc, packed, layout.row_bytes, minimum,
                                                           scale);
          }
          return;
        }
        const int64_t tile_rows = (height + layout.tile_h - 1) / layout.tile_h;
        const int64_t stride = whole_vectors((width + layout.tile_w - 1) / layout.tile_w * layout.tile_w);
        std::vector<float> column(tile_rows * stride), tile_cols(stride, 1.0f), lfc_rows(tile_rows * stride),
            hfc(whole_vectors(layout.area));
        for (int64_t w0 = 0; w0 < width; w0 += layout.tile_w) tile_cols[w0] = std::min(layout.tile_w, width - w0);
        for (int64_t p = begin; p < end; ++p) {
          division_compress_plane<scalar_t, BITS>(map + p * layout.area, height, width, layout.tile_h,
                                                  layout.tile_w, noise, static_cast<uint32_t>(p), column.data(),
                                                  tile_cols.data(), stride, lfc_rows.data(), hfc.data(),
                                                  lfc + p * layout.lfc_size, packed + p * layout.row_bytes,
                                                  minimum + p, scale + p);
        }
      });
    });
  });
}

void division_decompress(c10::ScalarType dtype, int bits, const c10::BFloat16* lfc, const uint8_t* packed,
                         const c10::BFloat16* minimum, const c10::BFloat16* scale, int64_t planes, int64_t height,
                         int64_t width, int64_t block, void* out) {
  const PlaneLayout layout = plane_layout(height, width, block, bits);
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    auto* map = static_cast<scalar_t*>(out);
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int BITS = decltype(bits_constant)::value;
      at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> lfc_row(width), staging(std::is_same_v<scalar_t, float> ? 0 : layout.area);
        std::vector<int32_t> level(layout.row_bytes * (8 / BITS));
        for (int64_t p = begin; p < end; ++p) {
          division_decompress_plane<scalar_t, BITS>(lfc + p * layout.lfc_size, packed + p * layout.row_bytes,
                                                    minimum[p], scale[p], height, width, layout.tile_h,
                                                    layout.tile_w, lfc_row.data(), level.data(), staging.data(),
                                                    map + p * layout.area);
        }
      });
    });
  });
}

// -- ActNN-style: one task per group of values -----------------------------------------------------

void group_compress(c10::ScalarType dtype, int bits, const void* x, int64_t numel, int64_t group_size,
                    int64_t groups, uint64_t seed, uint64_t offset, uint8_t* packed, c10::BFloat16* minimum,
                    c10::BFloat16* scale) {
  const int64_t row_bytes = packed_row_bytes(group_size, bits);
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    const auto* map = static_cast<const scalar_t*>(x);
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int BITS = decltype(bits_constant)::value;
      at::parallel_for(0, groups, std::max<int64_t>(1, 16384 / group_size), [&](int64_t begin, int64_t end) {
        const int64_t stride = whole_vectors(group_size);
        std::vector<float> values(kGroupBatch * stride);
        RowNoise noise(seed, offset, group_size);
        for (int64_t g = begin; g < end; g += kGroupBatch) {
          group_compress_groups<scalar_t, BITS>(map, numel, g, std::min<int64_t>(kGroupBatch, end - g), group_size,
                                                noise, values.data(), stride, packed, row_bytes, minimum, scale);
        }
      });
    });
  });
}

void group_decompress(c10::ScalarType dtype, int bits, const uint8_t* packed, const c10::BFloat16* minimum,
                      const c10::BFloat16* scale, int64_t numel, int64_t group_size, int64_t groups, void* out) {
  const int64_t row_bytes = packed_row_bytes(group_size, bits);
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    auto* map = static_cast<scalar_t*>(out);
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int BITS = decltype(bits_constant)::value;
      at::parallel_for(0, groups, std::max<int64_t>(1, 16384 / group_size), [&](int64_t begin, int64_t end) {
        std::vector<int32_t> level(row_bytes * (8 / BITS));
        std::vector<float> staging(std::is_same_v<scalar_t, float> ? 0 : group_size);
        for (int64_t g = begin; g < end; ++g) {
          const int64_t base = g * group_size;
          group_decompress_group<scalar_t, BITS>(packed + g * row_bytes, minimum[g], scale[g],
                                                 std::min(group_size, numel - base), level.data(), staging.data(),
                                                 map + base);
        }
      });
    });
  });
}

// -- 1-bit masks: one task per chunk of kChunk values ----------------------------------------------

// Calls chunk(first, count) for the chunks of numel values, over torch's threads.
template <typename F>
void for_each_chunk(int64_t numel, F&& chunk) {
  at::parallel_for(0, (numel + kChunk - 1) / kChunk, 16, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) chunk(c * kChunk, std::min(kChunk, numel - c * kChunk));
  });
}

void relu_pack(c10::ScalarType dtype, const void* x, int64_t numel, void* out, uint8_t* packed) {
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    const auto* map = static_cast<const scalar_t*>(x);
    auto* result = static_cast<scalar_t*>(out);
    for_each_chunk(numel, [&](int64_t first, int64_t count) {
      relu_pack_chunk<scalar_t>(map + first, count, result + first, packed + first / 8);
    });
  });
}

void dropout_pack(c10::ScalarType dtype, const void* x, int64_t numel, float p, float gain, uint64_t seed,
                  uint64_t offset, void* out, uint8_t* packed) {
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    const auto* map = static_cast<const scalar_t*>(x);
    auto* result = static_cast<scalar_t*>(out);
    const int calls = membench::noise_calls(numel, membench::kDropoutPerCall);
    for_each_chunk(numel, [&](int64_t first, int64_t count) {
      dropout_pack_chunk<scalar_t>(map + first, count, p, gain, seed, offset,
                                   static_cast<uint32_t>(first / kDropoutBlock), calls, result + first,
                                   packed + first / 8);
    });
  });
}

void masked_grad(c10::ScalarType dtype, const void* grad_out, const uint8_t* packed, int64_t numel, float gain,
                 void* grad_in) {
  dispatch_map_type(dtype, [&](auto scalar) {
    using scalar_t = decltype(scalar);
    const auto* grad = static_cast<const scalar_t*>(grad_out);
    auto* result = static_cast<scalar_t*>(grad_in);
    for_each_chunk(numel, [&](int64_t first, int64_t count) {
      masked_grad_chunk<scalar_t>(grad + first, packed + first / 8, count, gain, result + first);
    });
  });
}

}  // namespace

const CpuKernels& kernels() {
  static const CpuKernels table{division_compress, division_decompress, group_compress, group_decompress,
                                relu_pack,         dropout_pack,        masked_grad};
  return table;
}

}  // namespace membench::MEMBENCH_CPU_NAMESPACE

#undef MEMBENCH_CPU_NAMESPACE
