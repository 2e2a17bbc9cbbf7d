// The CPU kernels of one instruction set, as a table of plain functions over raw pointers: what the
// bindings (division_ops.cpp) call, and what each instruction set's translation unit
// (division_cpu_baseline.cpp, division_cpu_avx2.cpp, division_cpu_avx512.cpp, through
// division_cpu_isa.h) defines. Arguments are checked by the bindings; maps are float32, float16 or
// bfloat16 (`dtype`), and `bits` is 1, 2, 4 or 8. The split keeps torch's and pybind11's heavy
// headers out of the kernels' translation units, which then compile side by side.

#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>

#include <cstdint>

namespace membench {

// Bytes of a packed row of `length` values at `bits` bits each (the layout: division_ops.cpp).
inline int64_t packed_row_bytes(int64_t length, int64_t bits) {
  const int64_t per_byte = 8 / bits;
  return (length + per_byte - 1) / per_byte;
}

struct CpuKernels {
  // DIVISION, per (sample, channel) plane: lfc (planes, tiles), packed (planes, row bytes),
  // minimum and scale (planes).
  void (*division_compress)(c10::ScalarType dtype, int bits, const void* x, int64_t planes, int64_t height,
                            int64_t width, int64_t block, uint64_t seed, uint64_t offset, c10::BFloat16* lfc,
                            uint8_t* packed, c10::BFloat16* minimum, c10::BFloat16* scale);
  void (*division_decompress)(c10::ScalarType dtype, int bits, const c10::BFloat16* lfc, const uint8_t* packed,
                              const c10::BFloat16* minimum, const c10::BFloat16* scale, int64_t planes,
                              int64_t height, int64_t width, int64_t block, void* out);
  // ActNN-style, per group of group_size values (the last one zero-padded).
  void (*group_compress)(c10::ScalarType dtype, int bits, const void* x, int64_t numel, int64_t group_size,
                         int64_t groups, uint64_t seed, uint64_t offset, uint8_t* packed, c10::BFloat16* minimum,
                         c10::BFloat16* scale);
  void (*group_decompress)(c10::ScalarType dtype, int bits, const uint8_t* packed, const c10::BFloat16* minimum,
                           const c10::BFloat16* scale, int64_t numel, int64_t group_size, int64_t groups,
                           void* out);
  // 1-bit masks over the flattened map.
  void (*relu_pack)(c10::ScalarType dtype, const void* x, int64_t numel, void* out, uint8_t* packed);
  void (*dropout_pack)(c10::ScalarType dtype, const void* x, int64_t numel, float p, float gain, uint64_t seed,
                       uint64_t offset, void* out, uint8_t* packed);
  void (*masked_grad)(c10::ScalarType dtype, const void* grad_out, const uint8_t* packed, int64_t numel,
                      float gain, void* grad_in);
};

namespace cpu_baseline {
const CpuKernels& kernels();
}
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MEMBENCH_X86_DISPATCH 1
namespace cpu_avx2 {
const CpuKernels& kernels();
}
namespace cpu_avx512 {
const CpuKernels& kernels();
}
#endif

}  // namespace membench
