// The CPU kernels' work on one plane, group or chunk of a map, written as loops the compiler vectorises.
//
// division_cpu_isa.h includes this file once per instruction set, inside a namespace, a
// `#pragma GCC target` region and with MEMBENCH_CPU_ISA set (2: AVX-512, 1: AVX2, 0: the baseline);
// the bindings pick one at run time, so the extension runs on any CPU and uses the vector units it
// finds. No include guard, on purpose; it includes nothing (division_cpu_isa.h includes
// <immintrin.h> and division_common.h before it).
//
// Every loop computes the same float operations, in the same order, as the pure-torch reference;
// vectorisation changes only which values are computed together. Minima and maxima are order-free
// (a zero minimum is made +0 and a NaN is tracked apart), so they too are exact.

// Values of a long row per noise block (division_common.h): of stochastic rounding and of dropout.
constexpr int kCalls = membench::kNoiseCalls;
constexpr int64_t kRoundingBlock = kCalls * membench::kRoundingPerCall;
constexpr int64_t kDropoutBlock = kCalls * membench::kDropoutPerCall;
// Values per step of a row: whole noise blocks of either kind, whole bytes, whole vectors.
constexpr int64_t kChunk = 2 * kRoundingBlock;

#if MEMBENCH_CPU_ISA == 1
// Philox's multiply of 8 32-bit lanes by m: the high and low halves of the 64-bit products.
inline void mulhilo8(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
#endif

// GCC/Clang vector extensions of the instruction set's own width, kWidth lanes of 32 bits: 16 on
// AVX-512, 8 on AVX2, 4 on the baseline (SSE2 on x86-64, NEON on AArch64). Without registers that
// wide, GCC lowers a vector's comparisons, selects and narrowing conversions element by element (a
// 16-lane select built for AVX2 is some 50 scalar instructions), so the kernels' loops work on
// native vectors; a row's steps of 16 values (a noise block's 16 calls) are kParts of them.
#if MEMBENCH_CPU_ISA == 2
constexpr int kWidth = 16;
#elif MEMBENCH_CPU_ISA == 1
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
constexpr int kParts = 16 / kWidth;
typedef float Floats __attribute__((vector_size(4 * kWidth)));
typedef int32_t Ints __attribute__((vector_size(4 * kWidth)));
typedef uint32_t Words __attribute__((vector_size(4 * kWidth)));  // for bit arithmetic that wraps
typedef uint8_t Bytes __attribute__((vector_size(kWidth)));
typedef float Floats4 __attribute__((vector_size(16)));

constexpr int32_t kOneBits = 0x3F800000;  // the bits of 1.0f

// Philox calls computed together: two vectors' worth, so that their dependency chains overlap.
constexpr int kLanes = 2 * kCalls;

#if MEMBENCH_CPU_ISA == 2
// One Philox round of 8 calls, counter words c[0 .. 3] in the low halves of 64-bit lanes: one
// multiply gives a lane's whole product (its high word shifted down, its low word in place), so no
// lanes are blended. The high halves hold garbage, which the multiplies and the XORs never move
// into a low half and the final narrowing drops.
inline void philox_round8x64(__m512i (&c)[4], __m512i m0, __m512i m1, __m512i key0, __m512i key1) {
  const __m512i product0 = _mm512_mul_epu32(c[0], m0), product1 = _mm512_mul_epu32(c[2], m1);
  c[0] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product1, 32), c[1], key0, 0x96);  // a ^ b ^ c
  c[2] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product0, 32), c[3], key1, 0x96);
  c[1] = product1;
  c[3] = product0;
}
#elif MEMBENCH_CPU_ISA == 1
inline void philox_round8(__m256i (&c)[4], __m256i m0, __m256i m1, __m256i key0, __m256i key1) {
  __m256i hi0, lo0, hi1, lo1;
  mulhilo8(c[0], m0, hi0, lo0);
  mulhilo8(c[2], m1, hi1, lo1);
  c[0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[1]), key0);
  c[2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[3]), key1);
  c[1] = lo1;
  c[3] = lo0;
}
#endif

// The first LANES (16 or kLanes) Philox calls: lane l has counter (call[l], row[l], offset low,
// offset high), and words[i][l] is its word i (membench::philox4x32_10, vectorised over the lanes).
template <int LANES = kLanes>
inline void philox_lanes(uint64_t seed, uint64_t offset, const uint32_t (&call)[kLanes], const uint32_t (&row)[kLanes],
                         uint32_t (&words)[4][kLanes]) {
  static_assert(LANES == 16 || LANES == kLanes, "Philox lanes come in vectors of 16");
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t o0 = static_cast<uint32_t>(offset), o1 = static_cast<uint32_t>(offset >> 32);
#if MEMBENCH_CPU_ISA == 2
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  constexpr int vectors = LANES / 8;
  __m512i c[vectors][4];
  for (int v = 0; v < vectors; ++v) {
    c[v][0] = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(call + 8 * v)));
    c[v][1] = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 8 * v)));
    c[v][2] = _mm512_set1_epi64(o0);
    c[v][3] = _mm512_set1_epi64(o1);
  }
  uint32_t key0 = k0, key1 = k1;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    const __m512i key0_v = _mm512_set1_epi64(key0), key1_v = _mm512_set1_epi64(key1);
    for (int v = 0; v < vectors; ++v) philox_round8x64(c[v], m0, m1, key0_v, key1_v);
  }
  for (int v = 0; v < vectors; ++v) {
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[i] + 8 * v), _mm512_cvtepi64_epi32(c[v][i]));
    }
  }
#elif MEMBENCH_CPU_ISA == 1
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  // Two vectors at a time: four 8-lane chains would spill the 16 ymm registers.
  for (int first = 0; first < LANES; first += 16) {
    __m256i c[2][4];
    for (int v = 0; v < 2; ++v) {
      c[v][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(call + first + 8 * v));
      c[v][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + first + 8 * v));
      c[v][2] = _mm256_set1_epi32(static_cast<int>(o0));
      c[v][3] = _mm256_set1_epi32(static_cast<int>(o1));
    }
    uint32_t key0 = k0, key1 = k1;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
      }
      const __m256i key0_v = _mm256_set1_epi32(static_cast<int>(key0));
      const __m256i key1_v = _mm256_set1_epi32(static_cast<int>(key1));
      for (int v = 0; v < 2; ++v) philox_round8(c[v], m0, m1, key0_v, key1_v);
    }
    for (int v = 0; v < 2; ++v) {
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[i] + first + 8 * v), c[v][i]);
      }
    }
  }
#else
  for (int l = 0; l < LANES; ++l) {
    const membench::Philox4 r = membench::philox4x32_10(call[l], row[l], o0, o1, k0, k1);
    for (int i = 0; i < 4; ++i) words[i][l] = r.word[i];
  }
#endif
}

// U-bit uniforms of noise blocks first_block .. first_block + blocks - 1 of a long row `row` (16
// calls per block of 16 * P values, P = 128 / U) into out[0 .. blocks * 16 * P), two blocks per
// kLanes calls (a last odd block by 16 calls). Dropout's; stochastic rounding takes its words whole
// (quantize_row).
template <int U>
inline void philox_uniforms(uint64_t seed, uint64_t offset, uint32_t row, uint32_t first_block, int64_t blocks,
                            float* out) {
  constexpr int per_word = 32 / U, block = kCalls * 4 * per_word;
  constexpr int per_lanes = kLanes / kCalls;
  for (int64_t b = 0; b < blocks; b += per_lanes) {
    alignas(64) uint32_t call[kLanes], rows[kLanes], words[4][kLanes];
    const uint32_t first_call = (first_block + static_cast<uint32_t>(b)) * kCalls;
    for (int l = 0; l < kLanes; ++l) {
      call[l] = first_call + static_cast<uint32_t>(l);
      rows[l] = row;
    }
    if (blocks - b == 1) {
      philox_lanes<kCalls>(seed, offset, call, rows, words);
    } else {
      philox_lanes(seed, offset, call, rows, words);
    }
    for (int64_t k = 0; k < per_lanes && b + k < blocks; ++k) {
      float* dst = out + (b + k) * block;
      for (int i = 0; i < 4; ++i) {
        for (int q = 0; q < per_word; ++q) {
          for (int l = 0; l < kCalls; ++l) {
            dst[(per_word * i + q) * kCalls + l] =
                membench::uniform_from_part<U>(membench::word_part<U>(words[i][kCalls * k + l], q));
          }
        }
      }
    }
  }
}

// Row k's values t = CALLS * v + c, c < CALLS, from uniforms[v][k * CALLS + c] (lane-major).
template <int CALLS, int PER_CALL>
inline void short_rows_in_order(const float (&uniforms)[PER_CALL][kLanes], float* out) {
  for (int k = 0; k < kLanes / CALLS; ++k) {
    for (int v = 0; v < PER_CALL; ++v) {
      __builtin_memcpy(out + PER_CALL * CALLS * k + CALLS * v, &uniforms[v][k * CALLS], 4 * CALLS);
    }
  }
}

// U-bit uniforms of the kLanes / calls short rows first_row, first_row + 1, ... (calls < 16 calls
// per block, one block each): row k's value t into out[P * calls * k + t], P * kLanes floats in all.
template <int U>
inline void philox_short_rows(uint64_t seed, uint64_t offset, uint32_t first_row, int calls, float* out) {
  constexpr int per_word = 32 / U, per_call = 4 * per_word;
  alignas(64) uint32_t call[kLanes], rows[kLanes], words[4][kLanes];
  for (int k = 0, l = 0; l < kLanes; ++k) {  // lane l = calls * k + c: row k's call c
    for (int c = 0; c < calls; ++c, ++l) {
      call[l] = static_cast<uint32_t>(c);
      rows[l] = first_row + static_cast<uint32_t>(k);
    }
  }
  philox_lanes(seed, offset, call, rows, words);
  // Part v of every lane, converted a vector at a time, then put in each row's value order.
  alignas(64) float uniforms[per_call][kLanes];
  for (int v = 0; v < per_call; ++v) {
    for (int l = 0; l < kLanes; ++l) {
      uniforms[v][l] = membench::uniform_from_part<U>(membench::word_part<U>(words[v / per_word][l], v % per_word));
    }
  }
  switch (calls) {
    case 1: short_rows_in_order<1, per_call>(uniforms, out); break;
    case 2: short_rows_in_order<2, per_call>(uniforms, out); break;
    case 4: short_rows_in_order<4, per_call>(uniforms, out); break;
    default: short_rows_in_order<8, per_call>(uniforms, out); break;
  }
}

// The stochastic-rounding noise of a task's rows (all of `length` values), generated as its rows come
// in increasing order and valid until the next request: a short row's uniforms (fewer than 16 calls,
// kLanes / calls rows at a time), or the Philox words of a row of one block of 16 calls (two rows at
// a time, so that two dependency chains overlap). Longer rows draw their own, a chunk at a time.
class RowNoise {
 public:
  RowNoise(uint64_t seed, uint64_t offset, int64_t length)
      : seed_(seed), offset_(offset), calls_(membench::noise_calls(length, membench::kRoundingPerCall)) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  int calls() const { return calls_; }

  // Short row `row`'s uniforms, value t at [t].
  const float* uniforms(int64_t row) {
    if (refill(row)) {
      philox_short_rows<membench::kRoundingBits>(seed_, offset_, static_cast<uint32_t>(row), calls_, uniforms_);
    }
    return uniforms_ + membench::kRoundingPerCall * calls_ * (row - first_);
  }

  // One-block row `row`'s words: word i of call c at [i * kLanes + c].
  const uint32_t* block_words(int64_t row) {
    if (refill(row)) {
      alignas(64) uint32_t call[kLanes], rows[kLanes];
      for (int l = 0; l < kLanes; ++l) {
        call[l] = static_cast<uint32_t>(l % kCalls);
        rows[l] = static_cast<uint32_t>(row + l / kCalls);
      }
      philox_lanes(seed_, offset_, call, rows, words_);
    }
    return &words_[0][kCalls * (row - first_)];
  }

 private:
  // Whether `row` lies outside the rows generated last (which it then starts).
  bool refill(int64_t row) {
    if (row >= first_ && row < first_ + kLanes / calls_) return false;
    first_ = row;
    return true;
  }

  uint64_t seed_, offset_;
  int calls_;
  int64_t first_ = -kLanes;  // a window of negative rows: none generated yet
  alignas(64) float uniforms_[membench::kRoundingPerCall * kLanes];
  alignas(64) uint32_t words_[4][kLanes];
};

// Range of n floats (grids_of turns ranges into their rows' grids).
struct RowRange {
  float minimum;
  float maximum;
  bool nan;
};

// `combine` of the kWidth lanes of v, in lane 0: v combined with itself rotated by half its lanes,
// then by a quarter, ... down to one lane (in registers; reading the lanes one by one would wait on
// the vector's store).
template <typename V, typename F>
inline V fold_lanes(V v, F combine) {
#if MEMBENCH_CPU_ISA == 2
  v = combine(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = combine(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = combine(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = combine(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#elif MEMBENCH_CPU_ISA == 1
  v = combine(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
  v = combine(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
  v = combine(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
#else
  v = combine(v, __builtin_shufflevector(v, v, 2, 3, 0, 1));
  v = combine(v, __builtin_shufflevector(v, v, 1, 0, 3, 2));
#endif
  return v;
}

// The range of values taken a vector (kWidth running minima, maxima and NaN flags) or a value at a
// time, in any order.
class RangeOf {
 public:
  void add(Floats x) {
    lo_ = x < lo_ ? x : lo_;
    hi_ = x > hi_ ? x : hi_;
    nan_ |= x != x;
  }

  void add(float x) {
    tail_.minimum = x < tail_.minimum ? x : tail_.minimum;
    tail_.maximum = x > tail_.maximum ? x : tail_.maximum;
    tail_.nan = tail_.nan || x != x;
  }

  // Lane l's range, of the vectors taken (one plane per lane, as division_compress_short_planes).
  RowRange lane(int l) const { return RowRange{lo_[l], hi_[l], nan_[l] != 0}; }

  RowRange range() const {
    const Floats lo = fold_lanes(lo_, [](Floats a, Floats b) { return b < a ? b : a; });
    const Floats hi = fold_lanes(hi_, [](Floats a, Floats b) { return b > a ? b : a; });
    const Ints nan = fold_lanes(nan_, [](Ints a, Ints b) { return a | b; });
    return RowRange{lo[0] < tail_.minimum ? lo[0] : tail_.minimum, hi[0] > tail_.maximum ? hi[0] : tail_.maximum,
                    nan[0] != 0 || tail_.nan};
  }

 private:
  Floats lo_ = Floats{} + INFINITY, hi_ = Floats{} - INFINITY;
  Ints nan_ = {};
  RowRange tail_{INFINITY, -INFINITY, false};
};

inline RowRange row_range_of(const float* v, int64_t n) {
  RangeOf range;
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    Floats x;
    __builtin_memcpy(&x, v + j, sizeof(x));
    range.add(x);
  }
  for (; j < n; ++j) range.add(v[j]);
  return range.range();
}

// dst[k] = src[k] - mean[k] (PER_VALUE) or src[k] - mean[0] for k < n, each taken into range.
template <bool PER_VALUE>
inline void subtract_into(const float* src, const float* mean, int64_t n, float* dst, RangeOf& range) {
  int64_t k = 0;
  for (; k + kWidth <= n; k += kWidth) {
    Floats x, m = Floats{} + mean[0];
    __builtin_memcpy(&x, src + k, sizeof(x));
    if constexpr (PER_VALUE) __builtin_memcpy(&m, mean + k, sizeof(m));
    x -= m;
    __builtin_memcpy(dst + k, &x, sizeof(x));
    range.add(x);
  }
  for (; k < n; ++k) {
    const float x = src[k] - mean[PER_VALUE ? k : 0];
    dst[k] = x;
    range.add(x);
  }
}

// c10::BFloat16(float) of each lane (nearest, ties to even; a NaN to 0x7FC0), as the float it is.
inline Floats round_to_bfloat16(Floats v) {
  const Words bits = reinterpret_cast<Words>(v);
  const Words rounded = (bits + (((bits >> 16) & 1u) + 0x7FFFu)) & 0xFFFF0000u;
  return reinterpret_cast<Floats>(v != v ? Ints{} + 0x7FC00000 : reinterpret_cast<Ints>(rounded));
}

// The bfloat16 next to each lane's (a bfloat16 as a float, not NaN) toward -infinity (DOWN) or
// +infinity, as c10's nextafter: one step of its bits away from or toward zero, or from a zero the
// least subnormal of the direction's sign.
template <bool DOWN>
inline Floats next_bfloat16(Floats v) {
  const Words bits = reinterpret_cast<Words>(v);
  const Ints negative = reinterpret_cast<Ints>(bits) < 0;
  const Words next = (DOWN ? negative : ~negative) ? bits + 0x10000u : bits - 0x10000u;
  const Ints zero = (bits & 0x7FFFFFFFu) == 0;
  return reinterpret_cast<Floats>(zero ? Words{} + (DOWN ? 0x80010000u : 0x10000u) : next);
}

// membench::row_grid of ranges[0 .. count) into grids[0 .. count), exactly, kWidth rows at a time
// and without branches: the scalar function's two roundings outward are data-dependent branches,
// mispredicted about one row in two, at the end of a chain that the row's rounding waits on.
inline void grids_of(const RowRange* ranges, int64_t count, int bits, membench::Grid* grids) {
  const float levels = static_cast<float>((1 << bits) - 1);
  for (int64_t first = 0; first < count; first += kWidth) {
    Floats minimum = {}, maximum = {};
    for (int l = 0; l < kWidth && first + l < count; ++l) {
      const RowRange& range = ranges[first + l];
      minimum[l] = range.nan ? NAN : range.minimum;
      maximum[l] = range.nan ? NAN : range.maximum;
    }
    minimum = minimum + 0.0f;  // -0 -> +0, as row_grid
    Floats low = round_to_bfloat16(minimum);
    low = low > minimum ? next_bfloat16<true>(low) : low;
    const Floats scale = (maximum - low) / levels;
    Floats step = round_to_bfloat16(scale);
    step = step < scale ? next_bfloat16<false>(step) : step;
    step = step > 0.0f ? step : Floats{} + 1.0f;
    const Ints low_bits = reinterpret_cast<Ints>(low), step_bits = reinterpret_cast<Ints>(step);
    for (int l = 0; l < kWidth && first + l < count; ++l) {
      grids[first + l] = membench::Grid{
          c10::BFloat16(static_cast<uint16_t>(low_bits[l] >> 16 & 0xFFFF), c10::BFloat16::from_bits()),
          c10::BFloat16(static_cast<uint16_t>(step_bits[l] >> 16 & 0xFFFF), c10::BFloat16::from_bits())};
    }
  }
}

inline membench::Grid grid_of(RowRange range, int bits) {
  membench::Grid grid;
  grids_of(&range, 1, bits, &grid);
  return grid;
}

// Packs level[0 .. count) (BITS bits each, one per byte; level holds whole output bytes' worth,
// zeroed here from count on) into `out`: an output byte's levels, read as one little-endian word of
// per_byte bytes, are shifted together into its low byte (level i from bit 8i to bit i * BITS), a
// loop over words, which vectorises.
template <int BITS>
inline void pack_levels(uint8_t* level, int64_t count, uint8_t* out) {
  constexpr int per_byte = 8 / BITS;
  for (int64_t k = count; k < (count + per_byte - 1) / per_byte * per_byte; ++k) level[k] = 0;
  using Word = std::conditional_t<per_byte == 1, uint8_t,
                                  std::conditional_t<per_byte == 2, uint16_t,
                                                     std::conditional_t<per_byte == 4, uint32_t, uint64_t>>>;
  for (int64_t b = 0; b < (count + per_byte - 1) / per_byte; ++b) {
    Word word;
    __builtin_memcpy(&word, level + b * per_byte, per_byte);
    Word byte = 0;
    for (int i = 0; i < per_byte; ++i) byte |= word >> (i * (8 - BITS));
    out[b] = static_cast<uint8_t>(byte);
  }
}

// Stochastic rounding of `count` floats (at most kChunk) on a grid (its low and 1 / step) with the
// given uniforms, packed into `out` (the bytes of the values, the last one zero-padded).
template <int BITS>
void quantize_chunk(const float* values, int64_t count, float low, float inverse_step, const float* uniforms,
                    uint8_t* out) {
  const float levels = static_cast<float>((1 << BITS) - 1);
  alignas(64) uint8_t level[kChunk];
  for (int64_t k = 0; k < count; ++k) {
    level[k] = static_cast<uint8_t>(membench::quantize_level(values[k], low, inverse_step, uniforms[k], levels));
  }
  pack_levels<BITS>(level, count, out);
}

// The 8-bit uniforms of part q (0 .. 3) of kWidth Philox words, membench::uniform_from_part<8>
// exactly: the float 1 + part / 256 assembled from its bits, less 1 - 1/512 (an exact difference, by
// Sterbenz's lemma): bit operations and one subtraction, with no integer-to-float conversion.
// The part is shifted straight to the mantissa's bits 15-22 and masked there: with AVX-512, a shift
// and one three-way logic instruction.
inline Floats rounding_uniforms(Ints word, int q) {
  const Words bits = reinterpret_cast<Words>(word);
  const Words shifted = q < 2 ? bits << (15 - 8 * q) : bits >> (8 * q - 15);
  const Words one_plus = (shifted & (0xFFu << 15)) | static_cast<uint32_t>(kOneBits);
  return reinterpret_cast<Floats>(one_plus) - (1.0f - 1.0f / 512.0f);
}

// x < y ? x : y in each lane, so y where x is NaN: on x86, the minimum instruction exactly (GCC
// emits a comparison and a blend for the conditional).
inline Floats below(Floats x, Floats y) {
#if MEMBENCH_CPU_ISA == 2
  return reinterpret_cast<Floats>(_mm512_min_ps(reinterpret_cast<__m512>(x), reinterpret_cast<__m512>(y)));
#elif MEMBENCH_CPU_ISA == 1
  return reinterpret_cast<Floats>(_mm256_min_ps(reinterpret_cast<__m256>(x), reinterpret_cast<__m256>(y)));
#elif defined(__SSE2__)
  return reinterpret_cast<Floats>(_mm_min_ps(reinterpret_cast<__m128>(x), reinterpret_cast<__m128>(y)));
#else
  return x < y ? x : y;
#endif
}

// 16 levels (0 .. 255, kParts vectors) as 16 bytes at `out`. AVX2 and SSE2 have no instruction that
// narrows 32-bit lanes to bytes, which GCC then does a lane at a time: saturating packs (exact on
// 0 .. 255) do it a vector at a time.
inline void store_level_bytes(const Ints (&level)[kParts], uint8_t* out) {
#if MEMBENCH_CPU_ISA == 1
  // The packs work within 128-bit halves: the bytes' 32-bit words hold levels 0-3, 8-11, 0-3, 8-11 |
  // 4-7, 12-15, 4-7, 12-15, which one permutation puts in order.
  const __m256i words = _mm256_packus_epi32(reinterpret_cast<__m256i>(level[0]), reinterpret_cast<__m256i>(level[1]));
  const __m256i bytes = _mm256_packus_epi16(words, words);
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(ordered));
#elif MEMBENCH_CPU_ISA == 0 && defined(__SSE2__)
  const __m128i low = _mm_packs_epi32(reinterpret_cast<__m128i>(level[0]), reinterpret_cast<__m128i>(level[1]));
  const __m128i high = _mm_packs_epi32(reinterpret_cast<__m128i>(level[2]), reinterpret_cast<__m128i>(level[3]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(low, high));
#else  // AVX-512's vpmovdb, NEON's narrowing moves
  for (int s = 0; s < kParts; ++s) {
    const Bytes bytes = __builtin_convertvector(level[s], Bytes);
    __builtin_memcpy(out + kWidth * s, &bytes, sizeof(bytes));
  }
#endif
}

// Stochastic rounding of `count` floats (at most one block, 256; `values` readable to a whole step of
// 16) with the Philox words of their block's 16 calls (word i of call c at words[i * stride + c]):
// value 16 v + c takes part v % 4 of word v / 4 of call c (division_common.h), so a vector of
// values takes its uniforms from one vector of words. Packed into `out` as quantize_chunk.
template <int BITS>
void quantize_block(const float* values, int64_t count, float low, float inverse_step, const uint32_t* words,
                    int64_t stride, uint8_t* out) {
  const float levels = static_cast<float>((1 << BITS) - 1);
  alignas(64) uint8_t level[kRoundingBlock];
  const int64_t steps = (count + 15) / 16;
  for (int64_t i = 0; 4 * i < steps; ++i) {  // word i serves steps 4i .. 4i + 3, part q step 4i + q
    for (int q = 0; q < 4 && 4 * i + q < steps; ++q) {  // unrolled, so that q shifts by constants
      const int64_t v = 4 * i + q;
      Ints step_level[kParts];
      for (int s = 0; s < kParts; ++s) {
        Floats x;
        Ints word;
        __builtin_memcpy(&x, values + 16 * v + kWidth * s, sizeof(x));
        __builtin_memcpy(&word, words + i * stride + kWidth * s, sizeof(word));
        x = (x - low) * inverse_step + rounding_uniforms(word, q);
        step_level[s] = __builtin_convertvector(below(x, Floats{} + levels), Ints);
      }
      store_level_bytes(step_level, level + 16 * v);
    }
  }
  pack_levels<BITS>(level, count, out);
}

// Stochastic rounding of row `row` (`length` values, readable to a whole vector) on its grid, packed
// into `out` (bytes of the row's layout), with the task's noise.
template <int BITS>
void quantize_row(const float* values, int64_t length, membench::Grid grid, RowNoise& noise, uint32_t row,
                  uint8_t* out) {
  constexpr int per_byte = 8 / BITS;
  const float low = static_cast<float>(grid.low), inverse_step = 1.0f / static_cast<float>(grid.step);
  if (noise.calls() < kCalls) {
    quantize_chunk<BITS>(values, length, low, inverse_step, noise.uniforms(row), out);
    return;
  }
  if (length <= kRoundingBlock) {
    quantize_block<BITS>(values, length, low, inverse_step, noise.block_words(row), kLanes, out);
    return;
  }
  // Two blocks' calls at a time (a last odd block alone).
  alignas(64) uint32_t call[kLanes], rows[kLanes], words[4][kLanes];
  for (int l = 0; l < kLanes; ++l) rows[l] = row;
  for (int64_t begin = 0; begin < length; begin += kChunk) {
    const int64_t count = length - begin < kChunk ? length - begin : kChunk;
    const uint32_t first_call = static_cast<uint32_t>(begin / kRoundingBlock) * kCalls;
    for (int l = 0; l < kLanes; ++l) call[l] = first_call + static_cast<uint32_t>(l);
    if (count <= kRoundingBlock) {
      philox_lanes<kCalls>(noise.seed(), noise.offset(), call, rows, words);
    } else {
      philox_lanes(noise.seed(), noise.offset(), call, rows, words);
    }
    for (int64_t b = 0; b * kRoundingBlock < count; ++b) {
      const int64_t first = begin + b * kRoundingBlock;
      quantize_block<BITS>(values + first, std::min(kRoundingBlock, length - first), low, inverse_step,
                           &words[0][kCalls * b], kLanes, out + first / per_byte);
    }
  }
}

// Levels t0 .. t0 + 15 of a packed row (t0 a multiple of 16), from its 2 * BITS bytes at
// packed + t0 * BITS / 8 (level t at bits BITS * t of the little-endian row), as kParts vectors:
// each lane takes the word holding its bits, broadcast from a scalar load, and one vector shift
// brings a vector of levels down.
template <int BITS>
inline void levels16(const uint8_t* packed, Ints (&level)[kParts]) {
  if constexpr (BITS == 8) {  // whole bytes: widened
    for (int s = 0; s < kParts; ++s) {
      Bytes bytes;
      __builtin_memcpy(&bytes, packed + kWidth * s, sizeof(bytes));
      level[s] = __builtin_convertvector(bytes, Ints);
    }
    return;
  }
  uint32_t word[2] = {0, 0};
  __builtin_memcpy(word, packed, 2 * BITS);
  for (int s = 0; s < kParts; ++s) {
    Ints lanes, shift;
#if MEMBENCH_CPU_ISA == 2
    if constexpr (BITS == 4) {  // 64 bits: two words, eight lanes each
      const Ints low = Ints{} + static_cast<int32_t>(word[0]), high = Ints{} + static_cast<int32_t>(word[1]);
      lanes = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31);
    } else {
      lanes = Ints{} + static_cast<int32_t>(word[0]);
    }
#else
    // A vector's kWidth * BITS <= 32 bits lie in one word.
    lanes = Ints{} + static_cast<int32_t>(word[kWidth * s * BITS / 32]);
#endif
    for (int i = 0; i < kWidth; ++i) shift[i] = (kWidth * s + i) * BITS % 32;
    level[s] = (lanes >> shift) & ((1 << BITS) - 1);
  }
}

// Values t0 .. t0 + 15 of a packed row on its grid: level * step + low (levels16's t0).
template <int BITS>
inline void dequantize16(const uint8_t* packed, float low, float step, Floats (&value)[kParts]) {
  Ints level[kParts];
  levels16<BITS>(packed, level);
  for (int s = 0; s < kParts; ++s) {
    const Floats v = __builtin_convertvector(level[s], Floats) * step;
    value[s] = v + low;
  }
}

// The levels of the first `length` values of a packed row (rounded up to whole bytes), as 32-bit
// integers: the loops that read them then vectorise a vector at a time (bytes would take four).
template <int BITS>
void unpack_row(const uint8_t* packed, int64_t length, int32_t* level) {
  constexpr int per_byte = 8 / BITS;
  constexpr int mask = (1 << BITS) - 1;
  const int64_t whole = length / 16 * 16, bytes = (length + per_byte - 1) / per_byte;
  for (int64_t t = 0; t < whole; t += 16) {
    Ints levels[kParts];
    levels16<BITS>(packed + t * BITS / 8, levels);
    __builtin_memcpy(level + t, levels, sizeof(levels));
  }
  for (int64_t b = whole / per_byte; b < bytes; ++b) {
    for (int i = 0; i < per_byte; ++i) level[b * per_byte + i] = (packed[b] >> (i * BITS)) & mask;
  }
}

// A run of a map's values as floats: the map's own when it holds floats, else converted into
// `buffer` by a loop of its own, which compilers vectorise (a vector's lanes converted one by one,
// a float at a time, are not: bfloat16 stores cost 15x float32's).
template <typename scalar_t>
inline const float* as_floats(const scalar_t* x, int64_t count, float* buffer) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return x;
  } else {
    for (int64_t k = 0; k < count; ++k) buffer[k] = static_cast<float>(x[k]);
    return buffer;
  }
}

// Where a run's float results go: the output when it holds floats, else `buffer`, which
// store_results then converts.
template <typename scalar_t>
inline float* float_results(scalar_t* out, float* buffer) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    return out;
  } else {
    return buffer;
  }
}

template <typename scalar_t>
inline void store_results(const float* results, int64_t count, scalar_t* out) {
  if constexpr (!std::is_same_v<scalar_t, float>) {
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<scalar_t>(results[k]);
  }
}

// -- DIVISION, one (sample, channel) plane -------------------------------------------------------

// Sums of the columns w0, w0 + 1, ... of rows h0 .. h1 - 1 (row stride `width`), as many as
// `Floats` holds, each from the top down starting at 0 + x (so a -0 sums to +0, as from a zeroed
// column), kept in a register.
template <typename Floats>
inline void column_block_sums(const float* plane, int64_t width, int64_t h0, int64_t h1, int64_t w0, float* column) {
  Floats sum = {}, x;
  for (int64_t h = h0; h < h1; ++h) {
    __builtin_memcpy(&x, plane + h * width + w0, sizeof(x));
    sum += x;
  }
  __builtin_memcpy(column + w0, &sum, sizeof(sum));
}

// v with its lanes moved down by R: lane l takes lane (l + R) % kWidth.
template <int R, int... L>
inline Floats lanes_down(Floats v, std::integer_sequence<int, L...>) {
  return __builtin_shufflevector(v, v, ((L + R) % kWidth)...);
}

// sum + v[l] + v[l + 1] + ... + v[l + G - 1], added in that order, in each lane l that starts a group of
// G lanes (the other lanes take sums across groups, unused).
template <int G, int... R>
inline Floats add_group_in_order(Floats sum, Floats v, std::integer_sequence<int, R...>) {
  ((sum += lanes_down<R>(v, std::make_integer_sequence<int, kWidth>())), ...);
  return sum;
}

// Each group of G lanes filled with its first lane.
template <int G, int... L>
inline Floats spread_group_starts(Floats v, std::integer_sequence<int, L...>) {
  return __builtin_shufflevector(v, v, (L / G * G)...);
}

// Whether tile_means takes tiles of tile_w columns: a tile within one vector, or whole vectors.
inline bool vector_tiles(int64_t tile_w) { return kWidth % tile_w == 0 || tile_w % kWidth == 0; }

// A plane's tile means, G = min(tile_w, kWidth) lanes a group (vector_tiles): tile row tr's column
// sums at column + tr * stride, zero past the last column, and tile_cols[w] the number of columns
// of the tile that starts at column w (1 where no tile starts). Each tile's columns are added in
// order from 0, a vector of tiles at a time, divided by its value count, rounded to bfloat16 into
// `lfc`, and written across the tile's columns of its row of lfc_rows: what the scalar loop of
// division_compress_plane does with a chain of additions, a division and a rounding per tile. All
// tile rows in one loop, so that the vectors' chains overlap.
template <int G>
void tile_means(const float* column, const float* tile_cols, int64_t height, int64_t tile_h, int64_t tile_w,
                int64_t rows, int64_t cols, int64_t stride, float* lfc_rows, c10::BFloat16* lfc) {
  const int64_t vectors_per_tile = tile_w > kWidth ? tile_w / kWidth : 1;
  constexpr int tiles_per_vector = kWidth / G;
  for (int64_t tr = 0; tr < rows; ++tr) {
    const float rows_in_tile = static_cast<float>(std::min(tile_h, height - tr * tile_h));
    for (int64_t t = 0, first = 0; t < cols; t += tiles_per_vector, first += vectors_per_tile * kWidth) {
      Floats sum = {}, count, v;
      for (int64_t q = 0; q < vectors_per_tile; ++q) {
        __builtin_memcpy(&v, column + tr * stride + first + kWidth * q, sizeof(v));
        sum = add_group_in_order<G>(sum, v, std::make_integer_sequence<int, G>());
      }
      __builtin_memcpy(&count, tile_cols + first, sizeof(count));
      const Floats mean = spread_group_starts<G>(round_to_bfloat16(sum / (count * rows_in_tile)),
                                                 std::make_integer_sequence<int, kWidth>());
      for (int64_t q = 0; q < vectors_per_tile; ++q) {
        __builtin_memcpy(lfc_rows + tr * stride + first + kWidth * q, &mean, sizeof(mean));
      }
      const Ints mean_bits = reinterpret_cast<const Ints&>(mean);
      for (int m = 0; m < tiles_per_vector && t + m < cols; ++m) {
        lfc[tr * cols + t + m] =
            c10::BFloat16(static_cast<uint16_t>(mean_bits[m * G] >> 16 & 0xFFFF), c10::BFloat16::from_bits());
      }
    }
  }
}

// tile_means for the group width of tile_w (vector_tiles).
inline void tile_means_for(const float* column, const float* tile_cols, int64_t height, int64_t tile_h,
                           int64_t tile_w, int64_t rows, int64_t cols, int64_t stride, float* lfc_rows,
                           c10::BFloat16* lfc) {
  switch (tile_w < kWidth ? tile_w : kWidth) {
    case 1: tile_means<1>(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc); break;
    case 2: tile_means<2>(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc); break;
    case 4: tile_means<4>(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc); break;
#if MEMBENCH_CPU_ISA > 0
    case 8: tile_means<8>(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc); break;
#endif
#if MEMBENCH_CPU_ISA == 2
    case 16: tile_means<16>(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc); break;
#endif
  }
}

// Buffers: column and lfc_rows hold `stride` floats per tile row (the tiles' columns rounded up to
// whole vectors), column zero past `width`; tile_cols as tile_means's (division_compress fills
// both); hfc height * width rounded up to a whole vector.
template <typename scalar_t, int BITS>
void division_compress_plane(const scalar_t* plane, int64_t height, int64_t width, int64_t tile_h, int64_t tile_w,
                             RowNoise& noise, uint32_t row, float* column, const float* tile_cols, int64_t stride,
                             float* lfc_rows, float* hfc, c10::BFloat16* lfc, uint8_t* packed,
                             c10::BFloat16* minimum, c10::BFloat16* scale) {
  const int64_t rows = (height + tile_h - 1) / tile_h, cols = (width + tile_w - 1) / tile_w;
  // A float16 or bfloat16 plane is converted into hfc once, and its HFC computed there in place.
  const float* values = as_floats(plane, height * width, hfc);
  // Tile means: each column of a tile row summed downwards, every tile row's first, then the columns
  // of a tile (tile_means, or a tile at a time where tiles fit no vector); each tile's mean written
  // across its columns of its tile row of lfc_rows. Every tile row's means are written before the
  // HFC reads any: a vector load of values that scalar stores have just written cannot take them
  // from the stores, and waits for them to reach the cache (5b93b0b: 5% of the compression's time
  // on AVX-512, 32x32 planes).
  for (int64_t tr = 0; tr < rows; ++tr) {
    const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
    float* sums = column + tr * stride;
    int64_t w = 0;
    for (; w + kWidth <= width; w += kWidth) column_block_sums<Floats>(values, width, h0, h1, w, sums);
    for (; w + 4 <= width; w += 4) column_block_sums<Floats4>(values, width, h0, h1, w, sums);
    for (; w < width; ++w) {
      float sum = 0.0f;
      for (int64_t h = h0; h < h1; ++h) sum += values[h * width + w];
      sums[w] = sum;
    }
  }
  if (vector_tiles(tile_w)) {
    tile_means_for(column, tile_cols, height, tile_h, tile_w, rows, cols, stride, lfc_rows, lfc);
  } else {
    for (int64_t tr = 0; tr < rows; ++tr) {
      const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
      for (int64_t tc = 0; tc < cols; ++tc) {
        const int64_t w0 = tc * tile_w, w1 = w0 + tile_w < width ? w0 + tile_w : width;
        float sum = 0.0f;
        for (int64_t k = w0; k < w1; ++k) sum += column[tr * stride + k];
        const c10::BFloat16 mean(sum / static_cast<float>((h1 - h0) * (w1 - w0)));
        lfc[tr * cols + tc] = mean;
        for (int64_t k = w0; k < w1; ++k) lfc_rows[tr * stride + k] = static_cast<float>(mean);
      }
    }
  }
  // The HFC against the bfloat16 LFC, and its range; with one tile across, a tile row is one run of
  // values of one mean.
  RangeOf range;
  for (int64_t tr = 0; tr < rows; ++tr) {
    const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
    const float* means = lfc_rows + tr * stride;
    if (cols == 1) {
      subtract_into<false>(values + h0 * width, means, (h1 - h0) * width, hfc + h0 * width, range);
      continue;
    }
    for (int64_t h = h0; h < h1; ++h) subtract_into<true>(values + h * width, means, width, hfc + h * width, range);
  }
  const membench::Grid grid = grid_of(range.range(), BITS);
  *minimum = grid.low;
  *scale = grid.step;
  quantize_row<BITS>(hfc, height * width, grid, noise, row, packed);
}

// Short single-tile planes (at most 64 values; the LFC is the plane's mean), kWidth at a time, one
// plane per vector lane: each value goes through the same operations in the same order as in
// division_compress_plane, so the results are the same bits, but a short plane's fixed work (loop
// set-up, reductions across a vector, latencies one after another) is shared by kWidth planes.
constexpr int kPlaneLanes = kWidth;
constexpr int64_t kShortPlaneValues = 64;

// Planes first .. first + count - 1 (count <= kPlaneLanes; the other lanes repeat the first plane and are
// dropped) of `area` values, `width` per row; `noise` gives the seed, offset and calls per plane.
template <typename scalar_t, int BITS>
void division_compress_short_planes(const scalar_t* map, int64_t first, int64_t count, int64_t height, int64_t width,
                                    RowNoise& noise, c10::BFloat16* lfc, uint8_t* packed, int64_t row_bytes,
                                    c10::BFloat16* minimum, c10::BFloat16* scale) {
  constexpr int per_byte = 8 / BITS;
  const int64_t area = height * width;
  // value[j][l]: value j of lane l's plane, one plane per lane.
  alignas(64) Floats value[kShortPlaneValues];
  for (int l = 0; l < kPlaneLanes; ++l) {
    const scalar_t* src = map + (first + (l < count ? l : 0)) * area;
    for (int64_t j = 0; j < area; ++j) value[j][l] = static_cast<float>(src[j]);
  }
  // The planes' Philox calls, one plane per lane: word[c][i] is word i of call c of every lane's
  // plane (row), kLanes / kPlaneLanes calls' lanes at a time. Value j takes part j / calls of call
  // j % calls.
  const int calls = noise.calls();
  constexpr int calls_per_batch = kLanes / kPlaneLanes;
  Ints word[kShortPlaneValues / membench::kRoundingPerCall][4];
  for (int c = 0; c < calls; c += calls_per_batch) {
    alignas(64) uint32_t call[kLanes], row[kLanes], words[4][kLanes];
    for (int l = 0; l < kLanes; ++l) {
      call[l] = static_cast<uint32_t>(c + l / kPlaneLanes);
      row[l] = static_cast<uint32_t>(first + l % kPlaneLanes);
    }
    if ((calls - c) * kPlaneLanes <= 16) {
      philox_lanes<16>(noise.seed(), noise.offset(), call, row, words);
    } else {
      philox_lanes(noise.seed(), noise.offset(), call, row, words);
    }
    for (int k = 0; k < calls_per_batch && c + k < calls; ++k) {
      for (int i = 0; i < 4; ++i) __builtin_memcpy(&word[c + k][i], &words[i][kPlaneLanes * k], sizeof(Ints));
    }
  }
  // The mean: each column summed downwards from 0, then the columns from 0, over the value count.
  alignas(64) Floats column[kShortPlaneValues];
  const Floats zero = {};
  for (int64_t w = 0; w < width; ++w) column[w] = zero + value[w];
  for (int64_t h = 1; h < height; ++h) {
    for (int64_t w = 0; w < width; ++w) column[w] += value[h * width + w];
  }
  Floats sum = {};
  for (int64_t w = 0; w < width; ++w) sum += column[w];
  const Floats mean_value = sum / static_cast<float>(area);
  Floats mean;
  alignas(64) c10::BFloat16 mean_bf16[kPlaneLanes];
  for (int l = 0; l < kPlaneLanes; ++l) {
    mean_bf16[l] = c10::BFloat16(mean_value[l]);
    mean[l] = static_cast<float>(mean_bf16[l]);
  }
  // The HFC and each plane's range.
  RangeOf range;
  for (int64_t j = 0; j < area; ++j) {
    const Floats x = value[j] - mean;
    value[j] = x;
    range.add(x);
  }
  RowRange ranges[kPlaneLanes];
  membench::Grid grids[kPlaneLanes];
  for (int l = 0; l < kPlaneLanes; ++l) ranges[l] = range.lane(l);
  grids_of(ranges, kPlaneLanes, BITS, grids);
  Floats low, inverse_step;
  for (int l = 0; l < kPlaneLanes; ++l) {
    const membench::Grid& grid = grids[l];
    if (l < count) {
      lfc[first + l] = mean_bf16[l];
      minimum[first + l] = grid.low;
      scale[first + l] = grid.step;
    }
    low[l] = static_cast<float>(grid.low);
    inverse_step[l] = 1.0f / static_cast<float>(grid.step);
  }
  // Stochastic rounding (membench::quantize_level, a lane at a time) and packing.
  const float levels = static_cast<float>((1 << BITS) - 1);
  alignas(64) Ints level[kShortPlaneValues + per_byte];
  for (int64_t j = 0; j < area; ++j) {
    const int64_t part = j / calls;
    const Floats uniform = rounding_uniforms(word[j % calls][part / 4], static_cast<int>(part % 4));
    Floats x = (value[j] - low) * inverse_step + uniform;
    x = x < levels ? x : levels;
    level[j] = __builtin_convertvector(x, Ints);
  }
  const int64_t bytes = (area + per_byte - 1) / per_byte;
  for (int64_t j = area; j < bytes * per_byte; ++j) level[j] = Ints{};
  for (int64_t b = 0; b < bytes; ++b) {
    Ints byte = {};
    for (int i = 0; i < per_byte; ++i) byte |= level[b * per_byte + i] << (i * BITS);
    for (int l = 0; l < count; ++l) packed[(first + l) * row_bytes + b] = static_cast<uint8_t>(byte[l]);
  }
}

// Buffers: lfc_row holds `width` floats, level the plane's values rounded up to whole bytes, staging
// the plane's values (unused for float32 maps).
template <typename scalar_t, int BITS>
void division_decompress_plane(const c10::BFloat16* lfc, const uint8_t* packed, c10::BFloat16 minimum,
                               c10::BFloat16 scale, int64_t height, int64_t width, int64_t tile_h, int64_t tile_w,
                               float* lfc_row, int32_t* level, float* staging, scalar_t* out) {
  float* result = float_results(out, staging);
  const int64_t rows = (height + tile_h - 1) / tile_h, cols = (width + tile_w - 1) / tile_w;
  const float low = static_cast<float>(minimum), step = static_cast<float>(scale);
  // Where every run below is whole vectors, levels come straight from the packed bytes; else unpacked.
  const bool whole_vectors = width % 16 == 0 || (rows == 1 && cols == 1 && (height * width) % 16 == 0);
  if (!whole_vectors) unpack_row<BITS>(packed, height * width, level);
  for (int64_t tr = 0; tr < rows; ++tr) {
    const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
    // With one tile across, the tile row is one run of values of one mean; else a run is an image
    // row, which adds lfc_row.
    const float one_mean = static_cast<float>(lfc[tr * cols]);
    for (int64_t tc = 0; cols > 1 && tc < cols; ++tc) {
      const float mean = static_cast<float>(lfc[tr * cols + tc]);
      const int64_t w0 = tc * tile_w, w1 = w0 + tile_w < width ? w0 + tile_w : width;
      for (int64_t w = w0; w < w1; ++w) lfc_row[w] = mean;
    }
    const int64_t run = cols == 1 ? (h1 - h0) * width : width;
    if (whole_vectors) {
      // The packed bytes read in one sweep, 16 values at a time: with each run's start recomputed
      // from its index, decompression took 5-25% longer per value on 64- to 16-wide planes.
      const uint8_t* bits = packed + h0 * width * BITS / 8;
      for (float* dst = result + h0 * width; dst < result + h1 * width; dst += run) {
        for (int64_t k = 0; k < run; k += 16, bits += 2 * BITS) {
          Floats v[kParts];
          dequantize16<BITS>(bits, low, step, v);
          for (int s = 0; s < kParts; ++s) {
            Floats mean = Floats{} + one_mean;
            if (cols > 1) __builtin_memcpy(&mean, lfc_row + k + kWidth * s, sizeof(mean));
            v[s] += mean;
            __builtin_memcpy(dst + k + kWidth * s, &v[s], sizeof(v[s]));
          }
        }
      }
      continue;
    }
    for (int64_t first = h0 * width; first < h1 * width; first += run) {
      float* dst = result + first;
      for (int64_t k = 0; k < run; ++k) {
        float v = static_cast<float>(level[first + k]) * step;
        v = v + low;
        dst[k] = v + (cols == 1 ? one_mean : lfc_row[k]);
      }
    }
  }
  store_results(result, height * width, out);
}

// -- ActNN-style, a batch of groups ---------------------------------------------------------------

// Groups first .. first + count - 1 (count <= kGroupBatch) of the map `x` (numel values, the
// last group zero-padded): all their ranges, then their grids (grids_of, in vector lanes), then
// their stochastic rounding. A group's grid ends a chain of dependent steps (the range's folds, two
// roundings, a division) that its rounding waits on; found a batch at a time, the chains overlap
// the next groups' range passes (10d727e: 9% faster at 256 values a group on AVX-512). `values` holds
// kGroupBatch groups of group_size floats, `stride` apart (a whole number of vectors); a whole
// float32 group of whole vectors is read in place.
constexpr int kGroupBatch = 8;

template <typename scalar_t, int BITS>
void group_compress_groups(const scalar_t* x, int64_t numel, int64_t first, int64_t count, int64_t group_size,
                           RowNoise& noise, float* values, int64_t stride, uint8_t* packed, int64_t row_bytes,
                           c10::BFloat16* minimum, c10::BFloat16* scale) {
  const float* rows[kGroupBatch];
  RowRange ranges[kGroupBatch];
  membench::Grid grids[kGroupBatch];
  for (int64_t b = 0; b < count; ++b) {
    const int64_t g = first + b, base = g * group_size, in_map = std::min(group_size, numel - base);
    if (std::is_same_v<scalar_t, float> && in_map == group_size && group_size % 16 == 0) {
      rows[b] = reinterpret_cast<const float*>(x + base);
    } else {
      float* row = values + b * stride;
      for (int64_t k = 0; k < in_map; ++k) row[k] = static_cast<float>(x[base + k]);
      for (int64_t k = in_map; k < group_size; ++k) row[k] = 0.0f;
      rows[b] = row;
    }
    ranges[b] = row_range_of(rows[b], group_size);
  }
  grids_of(ranges, count, BITS, grids);
  for (int64_t b = 0; b < count; ++b) {
    minimum[first + b] = grids[b].low;
    scale[first + b] = grids[b].step;
  }
  for (int64_t b = 0; b < count; ++b) {
    const int64_t g = first + b;
    quantize_row<BITS>(rows[b], group_size, grids[b], noise, static_cast<uint32_t>(g), packed + g * row_bytes);
  }
}

// Buffers: level and staging (unused for float32 maps) hold the group's values.
template <typename scalar_t, int BITS>
void group_decompress_group(const uint8_t* packed, c10::BFloat16 minimum, c10::BFloat16 scale, int64_t count,
                            int32_t* level, float* staging, scalar_t* out) {
  float* result = float_results(out, staging);
  const float low = static_cast<float>(minimum), step = static_cast<float>(scale);
  const int64_t whole = count / 16 * 16;
  for (int64_t k = 0; k < whole; k += 16) {  // levels straight from the packed bytes, 16 at a time
    Floats v[kParts];
    dequantize16<BITS>(packed + k * BITS / 8, low, step, v);
    for (int s = 0; s < kParts; ++s) __builtin_memcpy(result + k + kWidth * s, &v[s], sizeof(v[s]));
  }
  if (whole < count) {
    unpack_row<BITS>(packed + whole * BITS / 8, count - whole, level);
    for (int64_t k = whole; k < count; ++k) {
      const float v = static_cast<float>(level[k - whole]) * step;
      result[k] = v + low;
    }
  }
  store_results(result, count, out);
}

// -- 1-bit masks, one chunk of at most kChunk values starting on a multiple of kChunk -------------

// Lane i's bit of `mask` (each lane all ones or zero) at bit i.
inline uint32_t lane_bits(Ints mask) {
#if MEMBENCH_CPU_ISA == 2
  return _mm512_movepi32_mask(reinterpret_cast<__m512i>(mask));
#elif MEMBENCH_CPU_ISA == 1
  return static_cast<uint32_t>(_mm256_movemask_ps(reinterpret_cast<__m256>(mask)));
#elif defined(__SSE2__)
  return static_cast<uint32_t>(_mm_movemask_ps(reinterpret_cast<__m128>(mask)));
#else
  uint32_t bits = 0;
  for (int i = 0; i < kWidth; ++i) bits |= static_cast<uint32_t>(mask[i] & 1) << i;
  return bits;
#endif
}

// A mask kernel's results and bits, 16 values at a time in native vectors (compilers do not vectorise
// a loop that writes both a value and a bit of each element on every instruction set: for AVX2, GCC
// emits a branch per value). `step(first)` writes the results of values first .. first + kWidth - 1
// and returns the mask of those kept; `value(k)` writes value k's and returns whether it is kept.
// Bits of the chunk's last byte from `count` on are zero.
template <typename Step, typename Value>
inline void mask_chunk(int64_t count, uint8_t* packed, Step&& step, Value&& value) {
  const int64_t whole = count / 16 * 16;
  for (int64_t k = 0; k < whole; k += 16) {
    uint32_t bits = 0;
    for (int s = 0; s < kParts; ++s) bits |= lane_bits(step(k + kWidth * s)) << (kWidth * s);
    packed[k / 8] = static_cast<uint8_t>(bits);
    packed[k / 8 + 1] = static_cast<uint8_t>(bits >> 8);
  }
  for (int64_t b = whole / 8; b < (count + 7) / 8; ++b) packed[b] = 0;
  for (int64_t k = whole; k < count; ++k) packed[k / 8] |= static_cast<uint8_t>(value(k) << (k % 8));
}

template <typename scalar_t>
void relu_pack_chunk(const scalar_t* x, int64_t count, scalar_t* out, uint8_t* packed) {
  alignas(64) float buffer[kChunk];
  const float* value = as_floats(x, count, buffer);
  float* result = float_results(out, buffer);
  mask_chunk(
      count, packed,
      [&](int64_t first) {
        Floats v;
        __builtin_memcpy(&v, value + first, sizeof(v));
        const Ints keep = v > 0.0f;
        v *= reinterpret_cast<Floats>(keep & kOneBits);
        __builtin_memcpy(result + first, &v, sizeof(v));
        return keep;
      },
      [&](int64_t k) {
        const float v = value[k];
        result[k] = v * (v > 0.0f ? 1.0f : 0.0f);
        return v > 0.0f;
      });
  store_results(result, count, out);
}

template <typename scalar_t>
void dropout_pack_chunk(const scalar_t* x, int64_t count, float p, float gain, uint64_t seed, uint64_t offset,
                        uint32_t first_block, int calls, scalar_t* out, uint8_t* packed) {
  alignas(64) float uniforms[kChunk], buffer[kChunk];
  if (calls < kCalls) {  // the map is one short row
    philox_short_rows<membench::kDropoutBits>(seed, offset, 0, calls, uniforms);
  } else {
    philox_uniforms<membench::kDropoutBits>(seed, offset, 0, first_block, (count + kDropoutBlock - 1) / kDropoutBlock,
                                            uniforms);
  }
  const float* value = as_floats(x, count, buffer);
  float* result = float_results(out, buffer);
  mask_chunk(
      count, packed,
      [&](int64_t first) {
        Floats v, uniform;
        __builtin_memcpy(&v, value + first, sizeof(v));
        __builtin_memcpy(&uniform, uniforms + first, sizeof(uniform));
        const Ints keep = uniform >= p;
        v = (v * reinterpret_cast<Floats>(keep & kOneBits)) * gain;
        __builtin_memcpy(result + first, &v, sizeof(v));
        return keep;
      },
      [&](int64_t k) {
        const float kept = uniforms[k] >= p ? 1.0f : 0.0f;
        result[k] = (value[k] * kept) * gain;
        return uniforms[k] >= p;
      });
  store_results(result, count, out);
}

template <typename scalar_t>
void masked_grad_chunk(const scalar_t* grad_out, const uint8_t* packed, int64_t count, float gain,
                       scalar_t* grad_in) {
  alignas(64) float buffer[kChunk];
  const float* grad = as_floats(grad_out, count, buffer);
  float* result = float_results(grad_in, buffer);
  // A vector's mask bits become 0/1 floats by one vector test, not a loop over bits.
  Ints lane_bit;
  for (int i = 0; i < kWidth; ++i) lane_bit[i] = 1 << i;
  const int64_t whole = count / 16 * 16;
  for (int64_t k = 0; k < whole; k += 16) {
    const int32_t bits = packed[k / 8] | packed[k / 8 + 1] << 8;
    for (int s = 0; s < kParts; ++s) {
      const Ints kept = (((Ints{} + (bits >> (kWidth * s))) & lane_bit) != 0) & kOneBits;
      Floats v;
      __builtin_memcpy(&v, grad + k + kWidth * s, sizeof(v));
      v = (v * reinterpret_cast<Floats>(kept)) * gain;
      __builtin_memcpy(result + k + kWidth * s, &v, sizeof(v));
    }
  }
  for (int64_t k = whole; k < count; ++k) {
    const float keep = (packed[k / 8] >> (k % 8)) & 1 ? 1.0f : 0.0f;
    result[k] = (grad[k] * keep) * gain;
  }
  store_results(result, count, grad_in);
}
