// What the CPU (division_cpu.h) and CUDA (division_cuda.cu) kernels share, as inline functions for
// both host and device: the counter-based noise of stochastic rounding and dropout, the outward
// bfloat16 grid of a row, and the tiles of DIVISION's low-frequency component. The pure-torch
// reference (membench/division/compress.py) computes the same numbers with the same operations in the
// same order.
//
// Noise: Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the generator of torch's and cuRAND's CUDA random numbers, with key (seed low, seed high
// 32 bits) and counter (call, row, offset low, offset high). A call's 128 bits give P = 128 / U
// uniforms of U bits: U = 8 for stochastic rounding (P = 16), U = 16 for dropout's masks (P = 8). A
// row of L values takes C calls per block of P * C values, C = noise_calls(L, P): 16 for rows
// longer than 8 * P values, else the least power of two with P * C >= L, so that a short row does
// not pay for 16 calls. Value j, t = j % PC, takes part t / C (of U bits, counted from the low bits
// of word 0) of call C * (j / PC) + t % C, so that C consecutive values take the same part of C
// consecutive calls (one vector of calls fills whole vectors of values, or the blocks of 16 / C
// short rows). Its uniform is (part + 1/2) * 2^-U, a float in (0, 1). Eight bits suffice for
// stochastic rounding: it stays unbiased to within 2^-9 of a quantisation step, finer than the
// bfloat16 grid itself, and one Philox call serves sixteen values; dropout's keep probability is
// exact to 2^-16.

#pragma once

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/BFloat16-math.h>

#include <cmath>
#include <cstdint>

namespace membench {

struct Philox4 {
  uint32_t word[4];
};

C10_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#ifdef __CUDA_ARCH__
  hi = __umulhi(a, b);  // one 32-bit instruction each, where a 64-bit product takes several
  lo = a * b;
#else
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
#endif
}

// Philox4x32 with 10 rounds: the key is bumped by the Weyl constants before every round but the first.
C10_HOST_DEVICE inline Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                             uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c0, hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform bits and uniforms per call of stochastic rounding and of dropout.
constexpr int kRoundingBits = 8;
constexpr int kRoundingPerCall = 128 / kRoundingBits;
constexpr int kDropoutBits = 16;
constexpr int kDropoutPerCall = 128 / kDropoutBits;

// The uniform of a U-bit part: (part + 1/2) * 2^-U (exact in a float).
template <int U>
C10_HOST_DEVICE inline float uniform_from_part(uint32_t part) {
  return (static_cast<float>(part) + 0.5f) * (1.0f / static_cast<float>(1u << U));
}

// Part q (0 .. 32 / U - 1, from the low bits) of one word, as an integer.
template <int U>
C10_HOST_DEVICE inline uint32_t word_part(uint32_t word, int q) {
  return (word >> (U * q)) & ((1u << U) - 1u);
}

// Part v (0 .. 128 / U - 1) of a call's four words.
template <int U>
C10_HOST_DEVICE inline uint32_t call_part(const Philox4& r, int v) {
  return word_part<U>(r.word[v / (32 / U)], v % (32 / U));
}

// Calls per block of a long row.
constexpr int kNoiseCalls = 16;

// Calls per block of a row of `length` values, `per_call` values a call: 16, or for rows of at most
// 8 * per_call values the least power of two whose block holds the row (one block).
C10_HOST_DEVICE inline int noise_calls(int64_t length, int per_call) {
  int calls = 1;
  while (calls < kNoiseCalls && per_call * calls < length) calls *= 2;
  return calls;
}

// The value of its row that part v of call `call` serves, in a row of `calls` calls per block.
C10_HOST_DEVICE inline int64_t noise_value(int64_t call, int v, int calls, int per_call) {
  return (call / calls) * per_call * calls + calls * v + call % calls;
}

// A row's quantisation grid from its minimum and maximum (NaN when the row holds a NaN): the minimum
// rounded down and the scale (max - min) / (2^bits - 1) rounded up to bfloat16, so that the grid
// low + k * step, k = 0 .. 2^bits - 1, covers the row; a zero minimum is +0, a scale that is not
// positive is 1. The CPU kernels compute the same grid a vector of rows at a time, without branches
// (division_cpu.h, grids_of).
struct Grid {
  c10::BFloat16 low;
  c10::BFloat16 step;
};

C10_HOST_DEVICE inline Grid row_grid(float minimum, float maximum, int bits) {
  minimum = minimum + 0.0f;  // -0 -> +0: which zero a row's minimum is would depend on the order of a scan
  c10::BFloat16 low(minimum);
  if (static_cast<float>(low) > minimum) {
    low = std::nextafter(low, c10::BFloat16(-INFINITY));
  }
  const float scale = (maximum - static_cast<float>(low)) / static_cast<float>((1 << bits) - 1);
  c10::BFloat16 step(scale);
  if (static_cast<float>(step) < scale) {
    step = std::nextafter(step, c10::BFloat16(INFINITY));
  }
  if (!(static_cast<float>(step) > 0.0f)) {
    step = c10::BFloat16(1.0f);
  }
  return Grid{low, step};
}

// Level of one value: floor((value - low) * inverse_step + uniform), clamped to 0 .. levels, with
// inverse_step = 1 / step rounded once per row (a multiplication, where a division per value
// costs several instructions on every device). As value >= low, the sum is not negative and
// truncation is the floor (a conversion compilers vectorise); a NaN value (a NaN row, or an
// infinity times a zero inverse) takes the top level.
C10_HOST_DEVICE inline int quantize_level(float value, float low, float inverse_step, float uniform, float levels) {
  float level = (value - low) * inverse_step + uniform;
  level = level < levels ? level : levels;
  return static_cast<int>(level);
}

// DIVISION's tiles: block x block, or the whole plane when it is smaller than a block either way.
C10_HOST_DEVICE inline void lfc_tile(int64_t height, int64_t width, int64_t block, int64_t& tile_h,
                                     int64_t& tile_w) {
  const bool global = height < block || width < block;
  tile_h = global ? height : block;
  tile_w = global ? width : block;
}

}  // namespace membench
