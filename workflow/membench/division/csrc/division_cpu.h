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

// Values per step of a row: whole noise blocks (division_common.h), whole bytes, whole vectors.
constexpr int64_t kChunk = 2 * membench::kNoiseBlock;
constexpr int kCalls = membench::kNoiseCalls;

#if MEMBENCH_CPU_ISA == 2
// Philox's multiply of 16 32-bit lanes by m: the high and low halves of the 64-bit products.
inline void mulhilo16(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}
#elif MEMBENCH_CPU_ISA == 1
inline void mulhilo8(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
#endif

// The Philox words of calls first_call .. first_call + 15 of row `row`: words[i][l] is word i of call
// first_call + l (membench::philox4x32_10, computed 16 or 8 calls at a time).
inline void philox_block(uint64_t seed, uint64_t offset, uint32_t row, uint32_t first_call,
                         uint32_t (&words)[4][kCalls]) {
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t o0 = static_cast<uint32_t>(offset), o1 = static_cast<uint32_t>(offset >> 32);
#if MEMBENCH_CPU_ISA == 2
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first_call)),
                                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(row));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(o0)), c3 = _mm512_set1_epi32(static_cast<int>(o1));
  uint32_t key0 = k0, key1 = k1;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(c0, m0, hi0, lo0);
    mulhilo16(c2, m1, hi1, lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(key0)));
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(key1)));
    c1 = lo1;
    c3 = lo0;
  }
  _mm512_storeu_si512(words[0], c0);
  _mm512_storeu_si512(words[1], c1);
  _mm512_storeu_si512(words[2], c2);
  _mm512_storeu_si512(words[3], c3);
#elif MEMBENCH_CPU_ISA == 1
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int half = 0; half < kCalls; half += 8) {
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first_call + half)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32(static_cast<int>(row));
    __m256i c2 = _mm256_set1_epi32(static_cast<int>(o0)), c3 = _mm256_set1_epi32(static_cast<int>(o1));
    uint32_t key0 = k0, key1 = k1;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
      }
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c0, m0, hi0, lo0);
      mulhilo8(c2, m1, hi1, lo1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(key0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(key1)));
      c1 = lo1;
      c3 = lo0;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[0] + half), c0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[1] + half), c1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[2] + half), c2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[3] + half), c3);
  }
#else
  for (int l = 0; l < kCalls; ++l) {
    const membench::Philox4 r = membench::philox4x32_10(first_call + static_cast<uint32_t>(l), row, o0, o1, k0, k1);
    for (int i = 0; i < 4; ++i) words[i][l] = r.word[i];
  }
#endif
}

// Uniforms of noise blocks first_block .. first_block + blocks - 1 of row `row` into
// out[0 .. blocks * kNoiseBlock).
inline void philox_uniforms(uint64_t seed, uint64_t offset, uint32_t row, uint32_t first_block, int64_t blocks,
                            float* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    alignas(64) uint32_t words[4][kCalls];
    philox_block(seed, offset, row, (first_block + static_cast<uint32_t>(b)) * kCalls, words);
    float* dst = out + b * membench::kNoiseBlock;
    for (int i = 0; i < 4; ++i) {
      for (int l = 0; l < kCalls; ++l) {
        dst[32 * i + l] = membench::uniform_from_half(words[i][l] & 0xFFFFu);
        dst[32 * i + 16 + l] = membench::uniform_from_half(words[i][l] >> 16);
      }
    }
  }
}

// Range of n floats (grid_of turns it into a row's grid).
struct RowRange {
  float minimum;
  float maximum;
  bool nan;
};

inline RowRange row_range_of(const float* v, int64_t n) {
  // 16 running minima, maxima and NaN flags as vectors (GCC/Clang vector extensions).
  typedef float Floats __attribute__((vector_size(64)));
  typedef int32_t Ints __attribute__((vector_size(64)));
  constexpr int lanes = 16;
  Floats lo, hi, x;
  Ints nan = {};
  for (int i = 0; i < lanes; ++i) {
    lo[i] = INFINITY;
    hi[i] = -INFINITY;
  }
  const int64_t whole = n - n % lanes;
  int64_t j = 0;
  for (; j < whole; j += lanes) {
    __builtin_memcpy(&x, v + j, sizeof(x));
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    nan |= x != x;
  }
  RowRange range{INFINITY, -INFINITY, false};
  for (; j < n; ++j) {
    range.minimum = v[j] < range.minimum ? v[j] : range.minimum;
    range.maximum = v[j] > range.maximum ? v[j] : range.maximum;
    range.nan = range.nan || v[j] != v[j];
  }
  for (int i = 0; i < lanes; ++i) {
    range.minimum = lo[i] < range.minimum ? lo[i] : range.minimum;
    range.maximum = hi[i] > range.maximum ? hi[i] : range.maximum;
    range.nan = range.nan || nan[i];
  }
  return range;
}

inline membench::Grid grid_of(RowRange range, int bits) {
  const float minimum = range.nan ? NAN : range.minimum, maximum = range.nan ? NAN : range.maximum;
  return membench::row_grid(minimum, maximum, bits);
}

// Stochastic rounding of a row of floats on its grid, packed into `out` (bytes of the row's layout).
template <int BITS>
void quantize_row(const float* values, int64_t length, membench::Grid grid, uint64_t seed, uint64_t offset,
                  uint32_t row, uint8_t* out) {
  constexpr int per_byte = 8 / BITS;
  const float low = static_cast<float>(grid.low), step = static_cast<float>(grid.step);
  const float levels = static_cast<float>((1 << BITS) - 1);
  alignas(64) float uniforms[kChunk];
  alignas(64) uint8_t level[kChunk];
  for (int64_t begin = 0; begin < length; begin += kChunk) {
    const int64_t count = length - begin < kChunk ? length - begin : kChunk;
    philox_uniforms(seed, offset, row, static_cast<uint32_t>(begin / membench::kNoiseBlock),
                    (count + membench::kNoiseBlock - 1) / membench::kNoiseBlock, uniforms);
    const float* src = values + begin;
    for (int64_t k = 0; k < count; ++k) {
      level[k] = static_cast<uint8_t>(membench::quantize_level(src[k], low, step, uniforms[k], levels));
    }
    const int64_t bytes = (count + per_byte - 1) / per_byte;
    for (int64_t k = count; k < bytes * per_byte; ++k) level[k] = 0;
    uint8_t* dst = out + begin / per_byte;
    for (int64_t b = 0; b < bytes; ++b) {
      uint8_t byte = 0;
      for (int i = 0; i < per_byte; ++i) byte |= static_cast<uint8_t>(level[b * per_byte + i] << (i * BITS));
      dst[b] = byte;
    }
  }
}

// The levels of the first `length` values of a packed row (rounded up to whole bytes).
template <int BITS>
void unpack_row(const uint8_t* packed, int64_t length, uint8_t* level) {
  constexpr int per_byte = 8 / BITS;
  constexpr int mask = (1 << BITS) - 1;
  const int64_t bytes = (length + per_byte - 1) / per_byte;
  for (int64_t b = 0; b < bytes; ++b) {
    for (int i = 0; i < per_byte; ++i) level[b * per_byte + i] = (packed[b] >> (i * BITS)) & mask;
  }
}

// -- DIVISION, one (sample, channel) plane -------------------------------------------------------

// Buffers: column and lfc_row hold `width` floats, hfc height * width.
template <typename scalar_t, int BITS>
void division_compress_plane(const scalar_t* plane, int64_t height, int64_t width, int64_t tile_h, int64_t tile_w,
                             uint64_t seed, uint64_t offset, uint32_t row, float* column, float* lfc_row, float* hfc,
                             c10::BFloat16* lfc, uint8_t* packed, c10::BFloat16* minimum, c10::BFloat16* scale) {
  const int64_t rows = (height + tile_h - 1) / tile_h, cols = (width + tile_w - 1) / tile_w;
  for (int64_t tr = 0; tr < rows; ++tr) {
    const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
    // Tile means: each column of the tile row summed downwards, then the columns of a tile.
    for (int64_t w = 0; w < width; ++w) column[w] = 0.0f;
    for (int64_t h = h0; h < h1; ++h) {
      const scalar_t* src = plane + h * width;
      for (int64_t w = 0; w < width; ++w) column[w] += static_cast<float>(src[w]);
    }
    for (int64_t tc = 0; tc < cols; ++tc) {
      const int64_t w0 = tc * tile_w, w1 = w0 + tile_w < width ? w0 + tile_w : width;
      float sum = 0.0f;
      for (int64_t w = w0; w < w1; ++w) sum += column[w];
      const c10::BFloat16 mean(sum / static_cast<float>((h1 - h0) * (w1 - w0)));
      lfc[tr * cols + tc] = mean;
      for (int64_t w = w0; w < w1; ++w) lfc_row[w] = static_cast<float>(mean);
    }
    // The HFC against the bfloat16 LFC.
    for (int64_t h = h0; h < h1; ++h) {
      const scalar_t* src = plane + h * width;
      float* dst = hfc + h * width;
      for (int64_t w = 0; w < width; ++w) dst[w] = static_cast<float>(src[w]) - lfc_row[w];
    }
  }
  const membench::Grid grid = grid_of(row_range_of(hfc, height * width), BITS);
  *minimum = grid.low;
  *scale = grid.step;
  quantize_row<BITS>(hfc, height * width, grid, seed, offset, row, packed);
}

// Buffers: lfc_row holds `width` floats, level the plane's values rounded up to whole bytes.
template <typename scalar_t, int BITS>
void division_decompress_plane(const c10::BFloat16* lfc, const uint8_t* packed, c10::BFloat16 minimum,
                               c10::BFloat16 scale, int64_t height, int64_t width, int64_t tile_h, int64_t tile_w,
                               float* lfc_row, uint8_t* level, scalar_t* out) {
  const int64_t rows = (height + tile_h - 1) / tile_h, cols = (width + tile_w - 1) / tile_w;
  const float low = static_cast<float>(minimum), step = static_cast<float>(scale);
  unpack_row<BITS>(packed, height * width, level);
  for (int64_t tr = 0; tr < rows; ++tr) {
    for (int64_t tc = 0; tc < cols; ++tc) {
      const float mean = static_cast<float>(lfc[tr * cols + tc]);
      const int64_t w0 = tc * tile_w, w1 = w0 + tile_w < width ? w0 + tile_w : width;
      for (int64_t w = w0; w < w1; ++w) lfc_row[w] = mean;
    }
    const int64_t h0 = tr * tile_h, h1 = h0 + tile_h < height ? h0 + tile_h : height;
    for (int64_t h = h0; h < h1; ++h) {
      const uint8_t* src = level + h * width;
      scalar_t* dst = out + h * width;
      for (int64_t w = 0; w < width; ++w) {
        float v = static_cast<float>(src[w]) * step;
        v = v + low;
        dst[w] = static_cast<scalar_t>(v + lfc_row[w]);
      }
    }
  }
}

// -- ActNN-style, one group -----------------------------------------------------------------------

// `count` values of the map (the rest of the group is zero padding); `values` holds group_size floats.
template <typename scalar_t, int BITS>
void group_compress_group(const scalar_t* x, int64_t count, int64_t group_size, uint64_t seed, uint64_t offset,
                          uint32_t row, float* values, uint8_t* packed, c10::BFloat16* minimum,
                          c10::BFloat16* scale) {
  for (int64_t k = 0; k < count; ++k) values[k] = static_cast<float>(x[k]);
  for (int64_t k = count; k < group_size; ++k) values[k] = 0.0f;
  const membench::Grid grid = grid_of(row_range_of(values, group_size), BITS);
  *minimum = grid.low;
  *scale = grid.step;
  quantize_row<BITS>(values, group_size, grid, seed, offset, row, packed);
}

template <typename scalar_t, int BITS>
void group_decompress_group(const uint8_t* packed, c10::BFloat16 minimum, c10::BFloat16 scale, int64_t count,
                            uint8_t* level, scalar_t* out) {
  const float low = static_cast<float>(minimum), step = static_cast<float>(scale);
  unpack_row<BITS>(packed, count, level);
  for (int64_t k = 0; k < count; ++k) {
    const float v = static_cast<float>(level[k]) * step;
    out[k] = static_cast<scalar_t>(v + low);
  }
}

// -- 1-bit masks, one chunk of at most kChunk values starting on a multiple of kChunk -------------

// Packs keep[0 .. count) into bytes; keep holds kChunk entries, zero from count on.
inline void pack_bits(const uint8_t* keep, int64_t count, uint8_t* packed) {
  for (int64_t b = 0; b < (count + 7) / 8; ++b) {
    uint8_t byte = 0;
    for (int i = 0; i < 8; ++i) byte |= static_cast<uint8_t>(keep[8 * b + i] << i);
    packed[b] = byte;
  }
}

template <typename scalar_t>
void relu_pack_chunk(const scalar_t* x, int64_t count, scalar_t* out, uint8_t* packed) {
  alignas(64) uint8_t keep[kChunk] = {};
  for (int64_t k = 0; k < count; ++k) {
    const float v = static_cast<float>(x[k]);
    keep[k] = v > 0.0f;
    out[k] = static_cast<scalar_t>(v * (v > 0.0f ? 1.0f : 0.0f));
  }
  pack_bits(keep, count, packed);
}

template <typename scalar_t>
void dropout_pack_chunk(const scalar_t* x, int64_t count, float p, float gain, uint64_t seed, uint64_t offset,
                        uint32_t first_block, scalar_t* out, uint8_t* packed) {
  alignas(64) float uniforms[kChunk];
  alignas(64) uint8_t keep[kChunk] = {};
  philox_uniforms(seed, offset, 0, first_block, (count + membench::kNoiseBlock - 1) / membench::kNoiseBlock,
                  uniforms);
  for (int64_t k = 0; k < count; ++k) {
    const float kept = uniforms[k] >= p ? 1.0f : 0.0f;
    keep[k] = uniforms[k] >= p;
    out[k] = static_cast<scalar_t>((static_cast<float>(x[k]) * kept) * gain);
  }
  pack_bits(keep, count, packed);
}

template <typename scalar_t>
void masked_grad_chunk(const scalar_t* grad_out, const uint8_t* packed, int64_t count, float gain,
                       scalar_t* grad_in) {
  alignas(64) uint8_t keep[kChunk];
  for (int64_t b = 0; b < (count + 7) / 8; ++b) {
    for (int i = 0; i < 8; ++i) keep[8 * b + i] = (packed[b] >> i) & 1;
  }
  for (int64_t k = 0; k < count; ++k) {
    grad_in[k] = static_cast<scalar_t>((static_cast<float>(grad_out[k]) * (keep[k] ? 1.0f : 0.0f)) * gain);
  }
}
