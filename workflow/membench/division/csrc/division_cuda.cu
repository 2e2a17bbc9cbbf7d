// CUDA kernels of the activation compressors: the same layouts, noise and arithmetic as the CPU
// kernels (division_cpu.h) and the pure-torch reference, bit for bit. Built only when torch has
// CUDA and nvcc is present. nvcc is given --fmad=false, so multiplications and additions are not
// contracted into FMAs, which would change the rounding.
//
// Structure: a team of lanes works on one row: DIVISION's (sample, channel) plane (tile means, the
// HFC's range, then stochastic rounding and packing) or an ActNN-style group. A team is as many lanes
// as the row has Philox calls per noise block (division_common.h), or the whole warp for rows of
// more than one block, so that a warp holds several short rows (eight 7x7 planes) and no lane draws
// noise for values that do not exist. Blocks are persistent: each takes a row per team at a time
// until none are left. A team first copies its row into shared memory with 16-byte loads where it
// fits (8 KiB), so that the passes read memory once, at full width (staging, below); larger rows
// are read from global memory, which the caches hold between the passes. Every lane that draws
// noise runs one Philox call for its 16 values (8-bit uniforms; 8 values for dropout's 16-bit ones)
// and multiplies by the row's reciprocal step; a row's levels are packed into bytes by a transpose
// in registers across the lanes (store_levels), or through shared memory in teams of fewer than 16
// lanes. The 1-bit masks read and write eight values at once where a map's layout allows.
//
// Only ATen's tensor, dispatch and per-operator headers and c10/cuda's stream, guard and exception
// headers are used: ATen/cuda/CUDAContext.h pulls in cuBLAS/cuSPARSE headers that a bare CUDA
// toolkit lacks, and torch's Python headers (the bindings, in division_ops.cpp) would only slow nvcc
// down. Every launch runs on the inputs' device (a device guard) and its current stream.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#ifndef MEMBENCH_CUDA_EMULATION
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <limits>
#include <type_traits>
#include <vector>

#include "division_common.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Values whose dropout mask a block draws at once: one Philox call (8 values) per thread.
constexpr int kBlockValues = membench::kDropoutPerCall * kThreads;
// Values a stochastic-rounding call serves.
constexpr int kPerCall = membench::kRoundingPerCall;
constexpr int kMaxWidth = 4096;  // a plane's rows and columns (column sums in shared memory)

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

#ifndef MEMBENCH_CUDA_EMULATION
// Runs `kernel` on the current stream and checks the launch. The tests' CUDA emulation
// (tests/division/cuda_emulation) defines MEMBENCH_CUDA_EMULATION and its own launch_kernel, which
// runs the same kernels on the CPU, a fiber per thread.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), int64_t blocks, int threads, int64_t shared, Args... args) {
  kernel<<<blocks, threads, shared, c10::cuda::getCurrentCUDAStream().stream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
#endif

#define MEMBENCH_DISPATCH_MAP_TYPES(TYPE, NAME, ...)                                    \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)             \
                                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)          \
                                         AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

// Calls f(std::integral_constant<int, bits>()) (bits already checked by the caller).
template <typename F>
void dispatch_bits(int64_t bits, F&& f) {
  switch (bits) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    default: f(std::integral_constant<int, 8>()); break;
  }
}

__host__ __device__ __forceinline__ int64_t packed_row_bytes(int64_t length, int64_t bits) {
  const int64_t per_byte = 8 / bits;
  return (length + per_byte - 1) / per_byte;
}

// The uniform of part v of a call, membench::uniform_from_part's number built from bits: 1 + (part +
// 1/2) 2^-U has the exponent of 1, so subtracting 1 leaves (part + 1/2) 2^-U exactly, without an
// integer-to-float conversion (a quarter-rate instruction). An 8-bit part is a byte of its word, so
// one byte permutation builds 1 + (part + 1/2) 2^-15 (the byte in bits 8-15, the half in bit 7), and
// one fused multiply-add, exact as its result is a float, scales it: 2 instructions, not 4.
template <int U>
__device__ __forceinline__ float call_uniform(const membench::Philox4& r, int v) {
  if constexpr (U == 8) {
    const uint32_t one_and_part = __byte_perm(0x3F800080u, r.word[v / 4], 0x3200u | ((4 + v % 4) << 4));
    return __fmaf_rn(__uint_as_float(one_and_part), 128.0f, -128.0f);
  } else {
    const uint32_t part = membench::call_part<U>(r, v);
    return __fsub_rn(__uint_as_float(0x3F800000u | (part << (23 - U)) | (1u << (22 - U))), 1.0f);
  }
}

__device__ __forceinline__ membench::Philox4 philox_call(uint64_t seed, uint64_t offset, uint32_t row,
                                                         int64_t call) {
  return membench::philox4x32_10(static_cast<uint32_t>(call), row, static_cast<uint32_t>(offset),
                                 static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed),
                                 static_cast<uint32_t>(seed >> 32));
}

// Minimum, maximum and NaN flag, reduced over a warp.
struct Range {
  float minimum;
  float maximum;
  int nan;
};

// fminf and fmaxf (one instruction each) skip NaNs, which the flag tracks apart; which zero they
// keep does not matter, as row_grid makes a zero minimum +0 and a zero scale 1.
__device__ __forceinline__ void range_add(Range& r, float v) {
  r.minimum = fminf(r.minimum, v);
  r.maximum = fmaxf(r.maximum, v);
  r.nan |= v != v;
}

// Merges another range (an empty one is (+inf, -inf): its bounds are not values).
__device__ __forceinline__ void range_merge(Range& r, float minimum, float maximum, int nan) {
  r.minimum = fminf(r.minimum, minimum);
  r.maximum = fmaxf(r.maximum, maximum);
  r.nan |= nan;
}

// The range over a team of `lanes` lanes (a power of two, aligned in the warp); every lane of the
// warp takes part.
__device__ __forceinline__ Range team_range(Range r, int lanes) {
  for (int delta = lanes / 2; delta > 0; delta /= 2) {
    const float minimum = __shfl_xor_sync(0xFFFFFFFFu, r.minimum, delta);
    const float maximum = __shfl_xor_sync(0xFFFFFFFFu, r.maximum, delta);
    const int nan = __shfl_xor_sync(0xFFFFFFFFu, r.nan, delta);
    range_merge(r, minimum, maximum, nan);
  }
  return r;
}

__device__ __forceinline__ membench::Grid range_grid(const Range& r, int bits) {
  return membench::row_grid(r.nan ? NAN : r.minimum, r.nan ? NAN : r.maximum, bits);
}

// Packs levels[0 .. count) (zero from count on, to a whole byte) into out, threads `first` on in steps of `stride`.
template <int BITS>
__device__ __forceinline__ void pack_levels(const uint8_t* levels, int64_t count, uint8_t* out, int first,
                                            int stride) {
  constexpr int per_byte = 8 / BITS;
  for (int64_t b = first; b < (count + per_byte - 1) / per_byte; b += stride) {
    uint8_t byte = 0;
    for (int i = 0; i < per_byte; ++i) byte |= static_cast<uint8_t>(levels[b * per_byte + i] << (i * BITS));
    out[b] = byte;
  }
}

// -- A step's levels into the packed row ----------------------------------------------------------
//
// A lane's 16 levels (part v of its Philox call) are the values j0 + calls * v, not 16 neighbours:
// in a row of whole noise blocks (16 calls) the 16 lanes of a block hold a 16 x 16 matrix of
// levels, lane l's part v being value l + 16 v of the block. Its transpose gives lane m the levels of
// values 16 m .. 16 m + 15, which are its 2 * BITS bytes of the packed row: four rounds of shuffles,
// with the levels in registers, packed as they are computed (LaneLevels). Shorter rows (teams of
// fewer than 16 lanes) go through shared memory; 8-bit levels need no packing (store_levels).

// A lane's 16 levels, level v at bits v * BITS of one word (four for 8-bit levels).
template <int BITS>
struct LaneLevels {
  using Word = std::conditional_t<BITS == 4, unsigned long long, uint32_t>;
  static constexpr int kWordBits = 8 * sizeof(Word);
  Word word[BITS == 8 ? 4 : 1] = {};

  // Adds, as the field is still zero: a shift and an add are one instruction (LEA), a shift and an or two.
  __device__ __forceinline__ void set(int v, uint32_t level) {
    word[v * BITS / kWordBits] += static_cast<Word>(level) << (v * BITS % kWordBits);
  }
  __device__ __forceinline__ uint8_t get(int v) const {
    return static_cast<uint8_t>((word[v * BITS / kWordBits] >> (v * BITS % kWordBits)) & ((1u << BITS) - 1));
  }
};

// The levels v of a word with v & half == 0.
template <int BITS>
__host__ __device__ constexpr typename LaneLevels<BITS>::Word low_levels(int half) {
  typename LaneLevels<BITS>::Word mask = 0;
  for (int v = 0; v < kPerCall; ++v) {
    if ((v & half) == 0) mask |= ((typename LaneLevels<BITS>::Word{1} << BITS) - 1) << (v * BITS);
  }
  return mask;
}

// A round of the transpose: lanes HALF apart swap the blocks of the matrix that lie off its
// diagonal at that scale (every lane of the warp takes part).
template <int BITS, int HALF, typename Word>
__device__ __forceinline__ Word transpose_round(Word word, int lane) {
  constexpr Word kLow = low_levels<BITS>(HALF);
  const Word partner = __shfl_xor_sync(0xFFFFFFFFu, word, HALF);
  return (lane & HALF) ? (word & ~kLow) | ((partner >> (HALF * BITS)) & kLow)
                       : (word & kLow) | ((partner & kLow) << (HALF * BITS));
}

// The transpose over the 16 lanes of a noise block (aligned in the warp), for BITS < 8.
template <int BITS, typename Word>
__device__ __forceinline__ Word transpose_levels(Word word, int lane) {
  word = transpose_round<BITS, 8>(word, lane);
  word = transpose_round<BITS, 4>(word, lane);
  word = transpose_round<BITS, 2>(word, lane);
  return transpose_round<BITS, 1>(word, lane);
}

// Writes the `bytes` low bytes of `word` at `out`, at once where `aligned`.
template <int BYTES, typename Word>
__device__ __forceinline__ void store_bytes(uint8_t* out, Word word, int bytes, bool aligned) {
  using Whole = std::conditional_t<BYTES == 2, uint16_t, std::conditional_t<BYTES == 4, uint32_t, uint64_t>>;
  if (aligned && bytes == BYTES) {
    *reinterpret_cast<Whole*>(out) = static_cast<Whole>(word);
  } else {
    for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(word >> (8 * i));
  }
}

// Writes a step's levels (level v of value j0 + calls * v; values from `length` on are not the
// row's) into the row's packed bytes `row_out` (`row_bytes` long) when the team is `active`; a
// step starts at value `begin`. Every lane of the warp calls it at once. Teams of fewer than 16
// lanes pack through `staging` (16 bytes a lane, in shared memory).
template <int BITS>
__device__ __forceinline__ void store_levels(const LaneLevels<BITS>& levels, int begin, int j0, int calls,
                                             int length, int lane, int lanes, bool active, uint8_t* staging,
                                             uint8_t* row_out, int64_t row_bytes) {
  if (calls == membench::kNoiseCalls) {
    if constexpr (BITS == 8) {
      if (active) {
#pragma unroll
        for (int v = 0; v < kPerCall; ++v) {
          if (j0 + calls * v < length) row_out[j0 + calls * v] = levels.get(v);
        }
      }
    } else {
      const auto word = transpose_levels<BITS>(levels.word[0], lane);
      constexpr int kBytes = kPerCall * BITS / 8;
      const int64_t first = static_cast<int64_t>(begin / kPerCall + lane) * kBytes;
      if (active && first < row_bytes) {
        // Rows of whole words start on a word: the packed tensor is allocated aligned.
        store_bytes<kBytes>(row_out + first, word, static_cast<int>(min64(kBytes, row_bytes - first)),
                            row_bytes % kBytes == 0);
      }
    }
  } else {
#pragma unroll
    for (int v = 0; v < kPerCall; ++v) staging[j0 + calls * v - begin] = levels.get(v);
    __syncwarp();
    if (active) {
      pack_levels<BITS>(staging, min64(kPerCall * lanes, length - begin), row_out + begin / (8 / BITS), lane, lanes);
    }
    __syncwarp();
  }
}

// -- Teams and staging ------------------------------------------------------------------------------
//
// Lanes per row of `length` values: the calls of its one noise block, or the warp (two blocks at a
// time) for a row of several.
int team_lanes(int64_t length) {
  const int calls = membench::noise_calls(length, kPerCall);
  return length > kPerCall * membench::kNoiseCalls ? 32 : calls;
}

// A team's row is copied into shared memory with 16-byte loads. Read one value per lane at a time,
// a warp has 64 or 128 bytes in flight, far too few to keep an H100's memory busy. A team whose row
// fits copies it first, each lane moving 16 bytes per load, four loads at a time, and the passes
// over the row then read shared memory. The loads are
// aligned: they start at the 16-byte boundary at or below the row and end at the one at or above
// its end, so the host stages only tensors whose data is 16-byte aligned and whose storage reaches
// the boundary past their last byte (stageable()); the bytes around a row that it reads are not used.

__host__ __device__ __forceinline__ int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Shared bytes that hold a staged row of `bytes` bytes wherever it starts.
__host__ __device__ __forceinline__ int64_t stage_bytes(int64_t bytes) { return align16(bytes) + 16; }

// Shared bytes through which a team of `lanes` lanes packs its levels (store_levels).
__host__ __device__ __forceinline__ int64_t level_staging_bytes(int lanes) {
  return lanes < membench::kNoiseCalls ? align16(kPerCall * lanes) : 0;
}

// A row is staged up to this size; longer rows are read from global memory. Larger stages leave too
// few warps resident: on an H100, a 112x112 float16 plane (25 KiB) compressed in 1.32 ms per
// 256x64 map staged and 0.71 ms unstaged, a 56x56 one (6 KiB) in 0.59 and 0.57 ms.
constexpr int64_t kMaxStage = 8 * 1024;

// Copies bytes [begin, begin + count) into `buffer` (16-byte aligned, stage_bytes(count) long) by
// the team's lanes (lane < lanes) and returns where `begin` landed; the warp's lanes are
// synchronised on return.
__device__ __forceinline__ const unsigned char* team_stage(const unsigned char* begin, int64_t count,
                                                           unsigned char* buffer, int lane, int lanes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~static_cast<uintptr_t>(15);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + count + 15) & ~static_cast<uintptr_t>(15);
  const uint4* from = reinterpret_cast<const uint4*>(first);
  uint4* to = reinterpret_cast<uint4*>(buffer);
  const int words = static_cast<int>((last - first) / 16);
#pragma unroll 4
  for (int i = lane; i < words; i += lanes) to[i] = __ldg(from + i);
  __syncwarp();
  return buffer + (reinterpret_cast<uintptr_t>(begin) - first);
}

bool stageable(const at::Tensor& x) {
  const int64_t bytes = x.numel() * x.element_size();
  const int64_t reach = static_cast<int64_t>(x.storage().nbytes()) - x.storage_offset() * x.element_size();
  return reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 && reach >= align16(bytes);
}

int64_t device_attribute(const at::Tensor& x, cudaDeviceAttr attribute) {
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, x.get_device()));
  return value;
}

// Warps per block (at most kWarps) for blocks of `fixed` + warps * `per_warp` shared bytes: the
// count that keeps the most warps resident on a multiprocessor, whose shared memory is what bounds
// them here; 0 when not one warp fits the block limit (the opt-in limit beyond 48 KiB).
int warps_that_fit(const at::Tensor& x, int64_t fixed, int64_t per_warp) {
  const int64_t block_limit = device_attribute(x, cudaDevAttrMaxSharedMemoryPerBlockOptin);
  const int64_t sm_shared = device_attribute(x, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  const int64_t sm_blocks = device_attribute(x, cudaDevAttrMaxBlocksPerMultiprocessor);
  const int64_t sm_warps = device_attribute(x, cudaDevAttrMaxThreadsPerMultiProcessor) / 32;
  constexpr int64_t kReservedPerBlock = 1024;  // what the runtime keeps of each block's shared memory
  int best = 0;
  int64_t best_resident = 0;
  for (int warps = 1; warps <= kWarps; ++warps) {
    const int64_t block = fixed + warps * per_warp;
    if (block > block_limit) break;
    const int64_t blocks = min64(sm_shared / (block + kReservedPerBlock), sm_blocks);
    const int64_t resident = min64(warps * blocks, sm_warps);
    if (resident >= best_resident) {
      best = warps;
      best_resident = resident;
    }
  }
  return best;
}

// A launch: warps per block, lanes per team (row), dynamic shared bytes and whether rows are staged.
struct Launch {
  int warps;
  int lanes;
  int64_t shared;
  bool staged;
};

// The launch for rows of `lanes` lanes whose team needs team_bytes(staged) shared bytes besides the
// block's `fixed` ones: staged when `stage` allows and the staged region fits, else from global memory.
template <typename TeamBytes>
Launch team_launch(const at::Tensor& x, int lanes, int64_t fixed, bool stage, TeamBytes team_bytes) {
  const int64_t teams = 32 / lanes;
  for (const bool staged : {true, false}) {
    if (staged && !stage) continue;
    const int warps = warps_that_fit(x, fixed, teams * team_bytes(staged));
    if (warps > 0) return {warps, lanes, fixed + warps * teams * team_bytes(staged), staged};
  }
  TORCH_CHECK(false, "rows of this size do not fit the GPU's shared memory");
}

// Lets `kernel` take `launch.shared` bytes (above 48 KiB a kernel must ask for them) and returns its
// grid for `rows` rows. Blocks are persistent: as many as the device holds at once (registers, shared
// memory and threads, as the occupancy calculator counts them), each taking a row per team at a time
// until none are left, so that a block's set-up is paid once and no second, partial wave of blocks
// starts late (Nsight Compute found 1.6 waves when the count ignored registers).
template <typename Kernel>
int64_t prepare_launch(Kernel kernel, const Launch& launch, int64_t rows, const at::Tensor& x) {
  if (launch.shared > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(launch.shared)));
  }
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * launch.warps,
                                                               static_cast<size_t>(launch.shared)));
  const int64_t rows_per_block = launch.warps * (32 / launch.lanes);
  const int64_t needed = (rows + rows_per_block - 1) / rows_per_block;
  return max64(1, min64(needed, max64(1, per_sm) * device_attribute(x, cudaDevAttrMultiProcessorCount)));
}

// A thread's team in its block, and its lane in the team (teams are aligned groups of `lanes`).
__device__ __forceinline__ int team_index(int lanes) { return threadIdx.x / lanes; }
__device__ __forceinline__ int team_lane(int lanes) { return static_cast<int>(threadIdx.x % 32) & (lanes - 1); }

// A team's row at the step of its block's rows that starts at `first`: clamped to the last row (a
// team past the end computes that row again without writing anything, so that the warp's teams
// stay in step), and whether it is the team's own.
struct TeamRow {
  int64_t row;
  bool active;
};

__device__ __forceinline__ TeamRow team_row(int64_t first, int64_t rows, int lanes) {
  const int64_t row = first + team_index(lanes);
  return {row < rows ? row : rows - 1, row < rows};
}

// RUN adjacent values of a map, loaded or stored at once (16 bytes an access at most: a staged
// plane is aligned to 16 bytes in shared memory, not more).
template <typename scalar_t, int RUN>
struct alignas(RUN * sizeof(scalar_t) < 16 ? RUN * sizeof(scalar_t) : 16) Run {
  scalar_t v[RUN];
};

// An int known at compile time, where a count is the same for a whole launch (device code cannot
// call std::integral_constant's conversion, which is host code).
template <int N>
struct Constant {
  __host__ __device__ constexpr operator int() const { return N; }
};

// -- Division by a divisor fixed for a launch --------------------------------------------------------
//
// Granlund and Montgomery's method, as torch's IntDivider: a multiply-high by a reciprocal computed
// on the host, three instructions, where a 32-bit division is about twenty and a 64-bit one a long
// software routine.

// Division of 32-bit unsigned n < 2^31 by a divisor fixed for a launch.
struct FastDivider {
  uint32_t divisor, magic;
  int shift;

  __device__ __forceinline__ uint32_t quotient(uint32_t n) const {
    return (__umulhi(n, magic) + n) >> shift;
  }
};

// Division of 64-bit indices, for maps beyond 2^31 values.
struct PlainDivider {
  int64_t divisor;

  __device__ __forceinline__ int64_t quotient(int64_t n) const { return n / divisor; }
};

// The divider of index_t's kind for `divisor` >= 1.
template <typename index_t>
auto divider(int64_t divisor) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    int shift = 0;
    while ((int64_t{1} << shift) < divisor) ++shift;
    const uint64_t magic = ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1;
    return FastDivider{static_cast<uint32_t>(divisor), static_cast<uint32_t>(magic), shift};
  } else {
    return PlainDivider{divisor};
  }
}

// -- DIVISION: one team per (sample, channel) plane -----------------------------------------------
//
// A block works on several planes at a time. Its shared memory: the tile of each value of a plane
// (uint8, shared by the block's planes, which have one size; when a plane has at most 256 tiles
// and 16 Ki values, else the tile is computed), then per team its region: when staged, the plane;
// the plane's LFC as floats (first, so that its address is the region's, one register, in the
// rounding loop); where tiles are summed by columns (tile_stats_by_columns), the sums, minima and
// maxima of a tile row's columns (width floats each); in teams of fewer than 16 lanes, the levels
// of one step (16 per lane). In-plane indices are 32-bit (a plane has fewer than 2^31 values; the
// host checks).

struct PlaneShape {
  int height, width, tile_h, tile_w, rows, cols, area;
  FastDivider by_cols;  // divides by cols
};

constexpr int64_t kMaxTileTable = 16 * 1024;

__host__ __device__ __forceinline__ bool has_tile_table(const PlaneShape& s) {
  return s.rows * s.cols <= 256 && s.area <= kMaxTileTable;
}

__host__ __device__ __forceinline__ int64_t plane_tables_bytes(const PlaneShape& s) {
  return has_tile_table(s) ? align16(s.area) : 0;
}

__host__ __device__ __forceinline__ int64_t plane_stage_bytes(const PlaneShape& s, int64_t element, bool staged) {
  return staged ? stage_bytes(static_cast<int64_t>(s.area) * element) : 0;
}

__host__ __device__ __forceinline__ int64_t plane_lfc_bytes(const PlaneShape& s) {
  return align16(static_cast<int64_t>(s.rows) * s.cols * 4);
}

__host__ __device__ __forceinline__ int64_t plane_column_bytes(const PlaneShape& s) {
  return align16(static_cast<int64_t>(s.width) * 4);
}

__host__ __device__ __forceinline__ int64_t plane_team_bytes(const PlaneShape& s, int64_t element, bool staged,
                                                             int lanes, int run) {
  return plane_stage_bytes(s, element, staged) + (run == 0 ? 3 * plane_column_bytes(s) : 0) + plane_lfc_bytes(s) +
         level_staging_bytes(lanes);
}

// The LFC tile of value j, computed (two integer divisions).
__device__ __forceinline__ int computed_tile(const PlaneShape& s, int j) {
  return (j / s.width / s.tile_h) * s.cols + (j % s.width) / s.tile_w;
}

// Fills the block's tile table (when the plane has one); the only block-wide barrier.
__device__ __forceinline__ void fill_tile_table(const PlaneShape& s, uint8_t* tile_of) {
  if (has_tile_table(s)) {
    for (int j = threadIdx.x; j < s.area; j += blockDim.x) tile_of[j] = static_cast<uint8_t>(computed_tile(s, j));
  }
  __syncthreads();
}

// The LFC tile of value j: from the table where the plane has one.
__device__ __forceinline__ int tile_index(const PlaneShape& s, const uint8_t* tile_of, int j) {
  return has_tile_table(s) ? tile_of[j] : computed_tile(s, j);
}

// Adds a tile's mean to the plane's LFC (`plane_lfc`, written when `active`) and to the team's
// float copy, and the tile's least and greatest HFC to `range`. Rounding is monotonic, so the least
// HFC of a tile, min(x - mean), is its least value minus the mean (likewise the greatest): the range
// needs no pass of its own. A NaN value makes its tile's mean, so that tile's least and greatest
// HFC, NaN, and with them the plane's range: values need no NaN test of their own.
__device__ __forceinline__ void add_tile(int t, float sum, int count, float least, float greatest, bool active,
                                         c10::BFloat16* plane_lfc, float* lfc_values, Range& range) {
  const c10::BFloat16 mean(__fdiv_rn(sum, static_cast<float>(count)));
  if (active) plane_lfc[t] = mean;
  const float mean_value = static_cast<float>(mean);
  lfc_values[t] = mean_value;
  const float hfc_least = __fsub_rn(least, mean_value), hfc_greatest = __fsub_rn(greatest, mean_value);
  range_merge(range, hfc_least, hfc_greatest, (hfc_least != hfc_least) | (hfc_greatest != hfc_greatest));
}

// Tile means and the HFC's range, a tile row at a time: each column of the tile row summed
// downwards (and its minimum and maximum kept) by a lane per column, then the columns of a tile
// summed by a lane per tile, through the team's column arrays (width floats each).
template <typename scalar_t>
__device__ __forceinline__ void tile_stats_by_columns(const scalar_t* plane, const PlaneShape& s, int lane,
                                                      int lanes, bool active, float* column_sum,
                                                      c10::BFloat16* plane_lfc, float* lfc_values, Range& range) {
  float* column_min = column_sum + plane_column_bytes(s) / 4;
  float* column_max = column_min + plane_column_bytes(s) / 4;
  for (int tr = 0; tr < s.rows; ++tr) {
    const int h0 = tr * s.tile_h, h1 = h0 + s.tile_h < s.height ? h0 + s.tile_h : s.height;
    for (int w = lane; w < s.width; w += lanes) {
      float sum = 0.0f, least = INFINITY, greatest = -INFINITY;
      for (int h = h0; h < h1; ++h) {
        const float v = static_cast<float>(plane[h * s.width + w]);
        sum = __fadd_rn(sum, v);
        least = fminf(least, v);
        greatest = fmaxf(greatest, v);
      }
      column_sum[w] = sum;
      column_min[w] = least;
      column_max[w] = greatest;
    }
    __syncwarp();
    for (int tc = lane; tc < s.cols; tc += lanes) {
      const int w0 = tc * s.tile_w, w1 = w0 + s.tile_w < s.width ? w0 + s.tile_w : s.width;
      float sum = 0.0f, least = INFINITY, greatest = -INFINITY;
      for (int w = w0; w < w1; ++w) {
        sum = __fadd_rn(sum, column_sum[w]);
        least = fminf(least, column_min[w]);
        greatest = fmaxf(greatest, column_max[w]);
      }
      add_tile(tr * s.cols + tc, sum, (h1 - h0) * (w1 - w0), least, greatest, active, plane_lfc, lfc_values, range);
    }
    __syncwarp();  // the column arrays are reused, the LFC is read by the whole team
  }
}

// The run of adjacent values a lane sums in tile_stats_in_runs on planes of `s` in teams of `lanes`
// lanes, the map's data at `address`: the longest of 8, 4 and 2 values that divides the tiles' and
// the rows' width, whose loads are aligned and of whose runs a tile has no more than the team's
// lanes; 0 (tile_stats_by_columns) where none is.
int tile_run(const PlaneShape& s, int lanes, const void* address, int64_t element) {
  for (const int run : {8, 4, 2}) {
    if (s.tile_w % run == 0 && s.width % run == 0 && s.tile_w / run <= lanes &&
        reinterpret_cast<uintptr_t>(address) % min64(16, run * element) == 0) {
      return run;
    }
  }
  return 0;
}

// Where a lane works in tile_stats_in_runs: a team takes `per_step` tiles at a time, `per_tile`
// lanes each; the lane's tile of a step and its run of the tile. The same for every plane of a
// launch, so found once (integer divisions).
struct RunSlot {
  int per_tile, per_step, slot, part;
};

__device__ __forceinline__ RunSlot run_slot(const PlaneShape& s, int run, int lane, int lanes) {
  const int per_tile = run > 0 ? s.tile_w / run : 1, slot = lane / per_tile;
  return {per_tile, lanes / per_tile, slot, lane - slot * per_tile};
}

// The same figures, the same sums in the same order, with the lanes busy and no shared memory: a
// lane per run of RUN columns of a tile, a team of `lanes` lanes taking lanes / (tile_w / RUN)
// tiles at a time (`at`). Each lane sums its columns downwards, a run of values per load; the
// tile's first lane then adds its lanes' column sums from left to right, by shuffles. Runs lie
// wholly inside the plane or wholly past its edge; the latter add +0.0, which leaves a sum that
// started from +0.0 unchanged, and their minimum and maximum are empty.
template <typename scalar_t, int RUN>
__device__ __forceinline__ void tile_stats_in_runs(const scalar_t* plane, const PlaneShape& s, const RunSlot& at,
                                                   bool active, c10::BFloat16* plane_lfc, float* lfc_values,
                                                   Range& range) {
  const int per_tile = at.per_tile, part = at.part, tiles = s.rows * s.cols;
  for (int first = 0; first < tiles; first += at.per_step) {
    const int t = first + at.slot;
    const bool owned = at.slot < at.per_step && t < tiles;
    const int tr = static_cast<int>(s.by_cols.quotient(t)), tc = t - tr * s.cols;
    const int h0 = tr * s.tile_h, h1 = h0 + s.tile_h < s.height ? h0 + s.tile_h : s.height;
    const int w0 = tc * s.tile_w, w1 = w0 + s.tile_w < s.width ? w0 + s.tile_w : s.width, w = w0 + RUN * part;
    float column[RUN] = {};
    float least = INFINITY, greatest = -INFINITY;
    if (owned && w < w1) {
#pragma unroll 2
      for (int h = h0; h < h1; ++h) {
        const Run<scalar_t, RUN> run = *reinterpret_cast<const Run<scalar_t, RUN>*>(plane + h * s.width + w);
#pragma unroll
        for (int i = 0; i < RUN; ++i) {
          const float v = static_cast<float>(run.v[i]);
          column[i] = __fadd_rn(column[i], v);
          least = fminf(least, v);
          greatest = fmaxf(greatest, v);
        }
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < RUN; ++i) sum = __fadd_rn(sum, column[i]);
    // Each lane's own figures are shuffled, not its running ones, which would reach the next tile.
    float tile_least = least, tile_greatest = greatest;
    for (int k = 1; k < per_tile; ++k) {
#pragma unroll
      for (int i = 0; i < RUN; ++i) sum = __fadd_rn(sum, __shfl_down_sync(0xFFFFFFFFu, column[i], k));
      tile_least = fminf(tile_least, __shfl_down_sync(0xFFFFFFFFu, least, k));
      tile_greatest = fmaxf(tile_greatest, __shfl_down_sync(0xFFFFFFFFu, greatest, k));
    }
    if (owned && part == 0) {
      add_tile(t, sum, (h1 - h0) * (w1 - w0), tile_least, tile_greatest, active, plane_lfc, lfc_values, range);
    }
  }
  __syncwarp();  // the LFC is read by the whole team
}

template <typename scalar_t, int BITS, bool STAGED, bool WHOLE_BLOCKS>
__global__ void division_compress_kernel(const scalar_t* __restrict__ x, int64_t planes, PlaneShape s, int lanes,
                                         int run, uint64_t seed, uint64_t offset,
                                         c10::BFloat16* __restrict__ lfc, uint8_t* __restrict__ packed,
                                         c10::BFloat16* __restrict__ minimum, c10::BFloat16* __restrict__ scale) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int64_t element = sizeof(scalar_t);
  uint8_t* tile_of = shared;
  fill_tile_table(s, tile_of);
  const int lane = team_lane(lanes);
  unsigned char* own =
      shared + plane_tables_bytes(s) + team_index(lanes) * plane_team_bytes(s, element, STAGED, lanes, run);
  float* lfc_values = reinterpret_cast<float*>(own + plane_stage_bytes(s, element, STAGED));
  float* column_sum = lfc_values + plane_lfc_bytes(s) / 4;
  uint8_t* staging = reinterpret_cast<uint8_t*>(column_sum) + (run == 0 ? 3 * plane_column_bytes(s) : 0);
  const RunSlot at = run_slot(s, run, lane, lanes);
  const int calls = membench::noise_calls(s.area, kPerCall);
  const int span = kPerCall * lanes;
  const float top = static_cast<float>((1 << BITS) - 1);
  const int64_t row_bytes = packed_row_bytes(s.area, BITS);
  const int64_t teams = blockDim.x / lanes;
  for (int64_t first = blockIdx.x * teams; first < planes; first += gridDim.x * teams) {
    const TeamRow team = team_row(first, planes, lanes);
    const int64_t p = team.row;
    const scalar_t* plane = x + p * s.area;
    if constexpr (STAGED) {
      plane = reinterpret_cast<const scalar_t*>(
          team_stage(reinterpret_cast<const unsigned char*>(plane), s.area * element, own, lane, lanes));
    }
    c10::BFloat16* plane_lfc = lfc + p * s.rows * s.cols;
    Range range{INFINITY, -INFINITY, 0};
    switch (run) {
      case 8: tile_stats_in_runs<scalar_t, 8>(plane, s, at, team.active, plane_lfc, lfc_values, range); break;
      case 4: tile_stats_in_runs<scalar_t, 4>(plane, s, at, team.active, plane_lfc, lfc_values, range); break;
      case 2: tile_stats_in_runs<scalar_t, 2>(plane, s, at, team.active, plane_lfc, lfc_values, range); break;
      default: tile_stats_by_columns(plane, s, lane, lanes, team.active, column_sum, plane_lfc, lfc_values, range);
    }
    const membench::Grid grid = range_grid(team_range(range, lanes), BITS);  // the same on the team's lanes
    if (lane == 0 && team.active) {
      minimum[p] = grid.low;
      scale[p] = grid.step;
    }
    const float low = static_cast<float>(grid.low), inverse_step = __frcp_rn(static_cast<float>(grid.step));
    uint8_t* row_out = packed + p * row_bytes;
    // Stochastic rounding, 16 values per lane at a time: a Philox call per lane serves values j0 +
    // calls * v, v < 16 (division_common.h; a plane of at most 256 values is one block of its
    // calls). Steps that lie wholly inside the plane skip the bounds checks. In planes of whole
    // noise blocks (WHOLE_BLOCKS: 16 calls, every plane above 128 values) `calls` is a constant, so
    // that a lane's values lie at constant offsets from its first and need no address arithmetic.
    // The next step's Philox call is computed before this step's values, so that its chain of
    // dependent multiplications overlaps their independent work.
    auto round_row = [&](auto row_calls) {
      auto step = [&](int begin, const membench::Philox4& r, auto checked) {
        const int call = begin / kPerCall + lane;
        const int j0 = static_cast<int>(membench::noise_value(call, 0, row_calls, kPerCall));
        LaneLevels<BITS> levels;
#pragma unroll
        for (int v = 0; v < kPerCall; ++v) {
          const int j = j0 + row_calls * v;
          if (!decltype(checked)::value || j < s.area) {
            const float hfc = __fsub_rn(static_cast<float>(plane[j]), lfc_values[tile_index(s, tile_of, j)]);
            levels.set(v, membench::quantize_level(hfc, low, inverse_step,
                                                   call_uniform<membench::kRoundingBits>(r, v), top));
          }
        }
        store_levels<BITS>(levels, begin, j0, row_calls, s.area, lane, lanes, team.active, staging, row_out,
                           row_bytes);
      };
      membench::Philox4 r = philox_call(seed, offset, static_cast<uint32_t>(p), lane);
      int begin = 0;
      for (; begin + span <= s.area; begin += span) {
        const membench::Philox4 next =
            philox_call(seed, offset, static_cast<uint32_t>(p), (begin + span) / kPerCall + lane);
        step(begin, r, std::false_type());
        r = next;
      }
      if (begin < s.area) step(begin, r, std::true_type());
    };
    if constexpr (WHOLE_BLOCKS) {
      round_row(Constant<membench::kNoiseCalls>());
    } else {
      round_row(calls);
    }
    __syncwarp();  // the next plane is staged where this one's values are read
  }
}

// Decompression's team region: when staged, the packed row; the LFC as floats.
__host__ __device__ __forceinline__ int64_t unpack_team_bytes(const PlaneShape& s, int bits, bool staged) {
  return (staged ? stage_bytes(packed_row_bytes(s.area, bits)) : 0) + plane_lfc_bytes(s);
}

// An unsigned integer of BYTES bytes.
template <int BYTES>
using Bytes = std::conditional_t<
    BYTES == 1, uint8_t, std::conditional_t<BYTES == 2, uint16_t, std::conditional_t<BYTES == 4, uint32_t, uint64_t>>>;

// The levels of the run of RUN values from value `first` (a multiple of RUN) of a packed row: RUN *
// BITS bits, read at once; run_level picks level i.
template <int RUN, int BITS>
__device__ __forceinline__ Bytes<RUN * BITS / 8> run_levels(const uint8_t* row, int first) {
  static_assert(RUN * BITS % 8 == 0, "a run's levels are whole bytes");
  return *reinterpret_cast<const Bytes<RUN * BITS / 8>*>(row + first / (8 / BITS));
}

template <int BITS, typename Word>
__device__ __forceinline__ int run_level(Word levels, int i) {
  return static_cast<int>((levels >> (i * BITS)) & ((1u << BITS) - 1));
}

// The run of values division_decompress_kernel unpacks at once on planes of `s` from `packed` at
// `bits` bits: 8 or 4 values whose levels are whole bytes, on planes of whole runs with a tile table
// whose packed rows start on 8 bytes; 0 (a value at a time) where none is.
int unpack_run(const PlaneShape& s, int64_t bits, const at::Tensor& packed) {
  if (!has_tile_table(s) || reinterpret_cast<uintptr_t>(packed.data_ptr()) % 8 != 0) return 0;
  for (const int run : {8, 4}) {
    if (s.area % run == 0 && run * bits % 8 == 0) return run;
  }
  return 0;
}

// Writes a plane's values (`value_of(level, tile)`) by runs of RUN per lane: a run's levels (RUN *
// BITS bits of the packed `row`) and its tiles (RUN bytes of the tile table `tile_of`) are read at
// once, and its values stored at once (every plane starts on a multiple of RUN).
template <int RUN, int BITS, typename scalar_t, typename ValueOf>
__device__ __forceinline__ void unpack_runs(const uint8_t* row, const uint8_t* tile_of, const PlaneShape& s, int lane,
                                            int lanes, ValueOf value_of, scalar_t* plane_out) {
  for (int j0 = RUN * lane; j0 < s.area; j0 += RUN * lanes) {
    const auto levels = run_levels<RUN, BITS>(row, j0);
    const Bytes<RUN> tiles = *reinterpret_cast<const Bytes<RUN>*>(tile_of + j0);
    Run<scalar_t, RUN> run;
#pragma unroll
    for (int i = 0; i < RUN; ++i) {
      run.v[i] = value_of(run_level<BITS>(levels, i), static_cast<int>((tiles >> (8 * i)) & 0xFF));
    }
    *reinterpret_cast<Run<scalar_t, RUN>*>(plane_out + j0) = run;
  }
}

template <typename scalar_t, int BITS, bool STAGED>
__global__ void division_decompress_kernel(const c10::BFloat16* __restrict__ lfc, const uint8_t* __restrict__ packed,
                                           const c10::BFloat16* __restrict__ minimum,
                                           const c10::BFloat16* __restrict__ scale, int64_t planes, PlaneShape s,
                                           int lanes, int run, scalar_t* __restrict__ out) {
  constexpr unsigned per_byte = 8 / BITS;
  extern __shared__ __align__(16) unsigned char shared[];
  uint8_t* tile_of = shared;
  fill_tile_table(s, tile_of);
  const int lane = team_lane(lanes);
  unsigned char* own = shared + plane_tables_bytes(s) + team_index(lanes) * unpack_team_bytes(s, BITS, STAGED);
  const int64_t row_bytes = packed_row_bytes(s.area, BITS);
  float* lfc_values = reinterpret_cast<float*>(own + (STAGED ? stage_bytes(row_bytes) : 0));
  const int64_t teams = blockDim.x / lanes;
  for (int64_t first = blockIdx.x * teams; first < planes; first += gridDim.x * teams) {
    const TeamRow team = team_row(first, planes, lanes);
    const int64_t p = team.row;
    const c10::BFloat16* plane_lfc = lfc + p * s.rows * s.cols;
    const uint8_t* row = packed + p * row_bytes;
    for (int t = lane; t < s.rows * s.cols; t += lanes) lfc_values[t] = static_cast<float>(plane_lfc[t]);
    if constexpr (STAGED) {
      row = team_stage(row, row_bytes, own, lane, lanes);  // synchronises the warp: the LFC is written too
    } else {
      __syncwarp();
    }
    const float low = static_cast<float>(minimum[p]), step = static_cast<float>(scale[p]);
    scalar_t* plane_out = out + p * s.area;
    auto value_of = [&](int level, int tile) {
      const float hfc = __fadd_rn(__fmul_rn(static_cast<float>(level), step), low);
      return static_cast<scalar_t>(__fadd_rn(hfc, lfc_values[tile]));
    };
    if (team.active) {
      switch (run) {
        case 8: unpack_runs<8, BITS>(row, tile_of, s, lane, lanes, value_of, plane_out); break;
        case 4:
          if constexpr (4 * BITS % 8 == 0) unpack_runs<4, BITS>(row, tile_of, s, lane, lanes, value_of, plane_out);
          break;
        default:
          for (unsigned j = lane; j < static_cast<unsigned>(s.area); j += lanes) {
            const int level = (row[j / per_byte] >> (j % per_byte * BITS)) & ((1 << BITS) - 1);
            plane_out[j] = value_of(level, tile_index(s, tile_of, static_cast<int>(j)));
          }
      }
    }
    __syncwarp();  // the team's region is reused at the next step
  }
}

// -- ActNN-style: one team per group --------------------------------------------------------------
//
// Per team in shared memory: when staged, the group; in teams of fewer than 16 lanes, the levels of
// one step (16 per lane).

__host__ __device__ __forceinline__ int64_t group_team_bytes(int64_t group_size, int64_t element, bool staged,
                                                             int lanes) {
  return (staged ? stage_bytes(group_size * element) : 0) + level_staging_bytes(lanes);
}

template <typename scalar_t, int BITS, bool STAGED, bool WHOLE_BLOCKS>
__global__ void group_compress_kernel(const scalar_t* __restrict__ x, int64_t numel, int64_t group_size,
                                      int64_t groups, int lanes, uint64_t seed, uint64_t offset,
                                      uint8_t* __restrict__ packed, c10::BFloat16* __restrict__ minimum,
                                      c10::BFloat16* __restrict__ scale) {
  constexpr int64_t element = sizeof(scalar_t);
  extern __shared__ __align__(16) unsigned char shared[];
  const int lane = team_lane(lanes);
  unsigned char* own = shared + team_index(lanes) * group_team_bytes(group_size, element, STAGED, lanes);
  uint8_t* staging = own + (STAGED ? stage_bytes(group_size * element) : 0);
  // In-group indices are 32-bit (the host checks the group size): 64-bit index arithmetic would
  // double the instructions per value of a kernel that is bound by them.
  const int size = static_cast<int>(group_size);
  const int calls = membench::noise_calls(size, kPerCall);
  const int span = kPerCall * lanes;
  const float top = static_cast<float>((1 << BITS) - 1);
  const int64_t row_bytes = packed_row_bytes(group_size, BITS);
  const int64_t teams = blockDim.x / lanes;
  for (int64_t first = blockIdx.x * teams; first < groups; first += gridDim.x * teams) {
    const TeamRow team = team_row(first, groups, lanes);
    const int64_t g = team.row;
    const int64_t base = g * group_size;
    const int count = static_cast<int>(min64(group_size, numel - base));
    const scalar_t* values = x + base;
    if constexpr (STAGED) {
      values = reinterpret_cast<const scalar_t*>(
          team_stage(reinterpret_cast<const unsigned char*>(values), count * element, own, lane, lanes));
    }
    // The range, with the zero padding of the last group.
    Range range{INFINITY, -INFINITY, 0};
    for (int k = lane; k < count; k += lanes) range_add(range, static_cast<float>(values[k]));
    if (count < size) range_add(range, 0.0f);
    const membench::Grid grid = range_grid(team_range(range, lanes), BITS);
    if (lane == 0 && team.active) {
      minimum[g] = grid.low;
      scale[g] = grid.step;
    }
    const float low = static_cast<float>(grid.low), inverse_step = __frcp_rn(static_cast<float>(grid.step));
    uint8_t* row_out = packed + g * row_bytes;
    // As DIVISION's: steps wholly inside the group's values skip the bounds checks, and groups of
    // whole noise blocks (WHOLE_BLOCKS) take `calls` as a constant. The last group of a map may be
    // short, so the teams of a warp may differ in which steps they check: the levels are stored from
    // one place, where the whole warp meets (store_levels' shuffles).
    auto round_group = [&](auto row_calls) {
      auto levels_of = [&](int call, int k0, auto checked) {
        const membench::Philox4 r = philox_call(seed, offset, static_cast<uint32_t>(g), call);
        LaneLevels<BITS> levels;
#pragma unroll
        for (int v = 0; v < kPerCall; ++v) {
          const int k = k0 + row_calls * v;
          if (!decltype(checked)::value || k < size) {
            const float value = !decltype(checked)::value || k < count ? static_cast<float>(values[k]) : 0.0f;
            levels.set(v, membench::quantize_level(value, low, inverse_step,
                                                   call_uniform<membench::kRoundingBits>(r, v), top));
          }
        }
        return levels;
      };
      for (int begin = 0; begin < size; begin += span) {
        const int call = begin / kPerCall + lane;
        const int k0 = static_cast<int>(membench::noise_value(call, 0, row_calls, kPerCall));
        const LaneLevels<BITS> levels =
            begin + span <= count ? levels_of(call, k0, std::false_type()) : levels_of(call, k0, std::true_type());
        store_levels<BITS>(levels, begin, k0, row_calls, size, lane, lanes, team.active, staging, row_out,
                           row_bytes);
      }
    };
    if constexpr (WHOLE_BLOCKS) {
      round_group(Constant<membench::kNoiseCalls>());
    } else {
      round_group(calls);
    }
    __syncwarp();  // the next group is staged where this one's values are read
  }
}

// A warp per group. Where `in_runs` (groups of whole runs of eight, packed rows on 8 bytes), a lane
// unpacks eight values at once, as DIVISION's decompressor does; the last group's values past its
// last whole run, and other groups, a value at a time.
template <typename scalar_t, int BITS>
__global__ void group_decompress_kernel(const uint8_t* __restrict__ packed, const c10::BFloat16* __restrict__ minimum,
                                        const c10::BFloat16* __restrict__ scale, int64_t numel, int64_t group_size,
                                        int64_t groups, bool in_runs, scalar_t* __restrict__ out) {
  constexpr unsigned per_byte = 8 / BITS;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (g >= groups) return;
  const int lane = threadIdx.x % 32;
  const int count = static_cast<int>(min64(group_size, numel - g * group_size));  // below 2^30 (the host checks)
  const uint8_t* row = packed + g * packed_row_bytes(group_size, BITS);
  scalar_t* group_out = out + g * group_size;
  const float low = static_cast<float>(minimum[g]), step = static_cast<float>(scale[g]);
  auto value_of = [&](int level) {
    return static_cast<scalar_t>(__fadd_rn(__fmul_rn(static_cast<float>(level), step), low));
  };
  const int in_eights = in_runs ? count / 8 * 8 : 0;
  for (int k0 = 8 * lane; k0 < in_eights; k0 += 8 * 32) {
    const auto levels = run_levels<8, BITS>(row, k0);
    Run<scalar_t, 8> run;
#pragma unroll
    for (int i = 0; i < 8; ++i) run.v[i] = value_of(run_level<BITS>(levels, i));
    *reinterpret_cast<Run<scalar_t, 8>*>(group_out + k0) = run;
  }
  for (unsigned k = in_eights + lane; k < static_cast<unsigned>(count); k += 32) {
    group_out[k] = value_of((row[k / per_byte] >> (k % per_byte * BITS)) & ((1 << BITS) - 1));
  }
}

// -- 1-bit masks ------------------------------------------------------------------------------------

// Whether a map's values can be read eight at a time: a whole number of eights, aligned to them.
bool in_eights(const at::Tensor& x) {
  return x.numel() % 8 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % (8 * x.element_size()) == 0;
}

// One thread per byte of the mask (eight values).
template <typename scalar_t, bool EIGHTS>
__global__ void relu_pack_kernel(const scalar_t* __restrict__ x, int64_t numel, scalar_t* __restrict__ out,
                                 uint8_t* __restrict__ packed) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= (numel + 7) / 8) return;
  uint8_t byte = 0;
  if constexpr (EIGHTS) {
    const Run<scalar_t, 8> in = reinterpret_cast<const Run<scalar_t, 8>*>(x)[b];
    Run<scalar_t, 8> kept;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = static_cast<float>(in.v[i]);
      kept.v[i] = static_cast<scalar_t>(__fmul_rn(v, v > 0.0f ? 1.0f : 0.0f));
      byte |= static_cast<uint8_t>(v > 0.0f) << i;
    }
    reinterpret_cast<Run<scalar_t, 8>*>(out)[b] = kept;
  } else {
    for (int i = 0; i < 8 && b * 8 + i < numel; ++i) {
      const float v = static_cast<float>(x[b * 8 + i]);
      out[b * 8 + i] = static_cast<scalar_t>(__fmul_rn(v, v > 0.0f ? 1.0f : 0.0f));
      byte |= static_cast<uint8_t>(v > 0.0f) << i;
    }
  }
  packed[b] = byte;
}

template <typename scalar_t>
__global__ void dropout_pack_kernel(const scalar_t* __restrict__ x, int64_t numel, float p, float gain,
                                    uint64_t seed, uint64_t offset, scalar_t* __restrict__ out,
                                    uint8_t* __restrict__ packed) {
  extern __shared__ __align__(16) unsigned char shared[];
  uint8_t* keep = shared;  // kBlockValues bytes
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kBlockValues;
  const int64_t call = begin / membench::kDropoutPerCall + threadIdx.x;
  const int calls = membench::noise_calls(numel, membench::kDropoutPerCall);
  const membench::Philox4 r = philox_call(seed, offset, 0, call);
  for (int v = 0; v < membench::kDropoutPerCall; ++v) {
    const int64_t j = membench::noise_value(call, v, calls, membench::kDropoutPerCall);
    const bool kept = call_uniform<membench::kDropoutBits>(r, v) >= p;
    if (j < numel) {
      out[j] = static_cast<scalar_t>(__fmul_rn(__fmul_rn(static_cast<float>(x[j]), kept ? 1.0f : 0.0f), gain));
    }
    keep[j - begin] = j < numel && kept;
  }
  __syncthreads();
  pack_levels<1>(keep, min64(kBlockValues, numel - begin), packed + begin / 8, threadIdx.x, blockDim.x);
}

// One thread per value, or with EIGHTS per byte of the mask.
template <typename scalar_t, bool EIGHTS>
__global__ void masked_grad_kernel(const scalar_t* __restrict__ grad_out, const uint8_t* __restrict__ packed,
                                   int64_t numel, float gain, scalar_t* __restrict__ grad_in) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if constexpr (EIGHTS) {
    if (j >= numel / 8) return;
    const uint8_t byte = packed[j];
    const Run<scalar_t, 8> grad = reinterpret_cast<const Run<scalar_t, 8>*>(grad_out)[j];
    Run<scalar_t, 8> result;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float keep = (byte >> i) & 1 ? 1.0f : 0.0f;
      result.v[i] = static_cast<scalar_t>(__fmul_rn(__fmul_rn(static_cast<float>(grad.v[i]), keep), gain));
    }
    reinterpret_cast<Run<scalar_t, 8>*>(grad_in)[j] = result;
  } else {
    if (j >= numel) return;
    const float keep = (packed[j / 8] >> (j % 8)) & 1 ? 1.0f : 0.0f;
    grad_in[j] = static_cast<scalar_t>(__fmul_rn(__fmul_rn(static_cast<float>(grad_out[j]), keep), gain));
  }
}

// -- max pooling with window indices --------------------------------------------------------------
//
// A thread per output (forward) or input (backward) value finds its plane, row and column, and the
// windows it lies in, by divisions by the map's sizes, the stride and the window: FastDivider's
// where every index fits 32 bits.

template <typename DividerType>
struct PoolShape {
  using Divider = DividerType;
  Divider height, width, out_h, out_w, kernel, stride;
  int padding;
};

template <typename scalar_t, typename index_t, typename Divider>
__global__ void maxpool_forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                                       int8_t* __restrict__ index, index_t planes, PoolShape<Divider> s) {
  const index_t o = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  const index_t out_h = s.out_h.divisor, out_w = s.out_w.divisor, height = s.height.divisor,
                width = s.width.divisor;
  const int kernel = s.kernel.divisor, stride = s.stride.divisor;
  if (o >= planes * out_h * out_w) return;
  const index_t row = s.out_w.quotient(o), ow = o - row * out_w;
  const index_t p = s.out_h.quotient(row), oh = row - p * out_h;
  const scalar_t* plane = x + p * height * width;
  scalar_t best = plane[0];
  float best_value = -INFINITY;
  int best_index = -1;
  for (int kh = 0; kh < kernel; ++kh) {
    const index_t ih = oh * stride - s.padding + kh;
    if (ih < 0 || ih >= height) continue;
    for (int kw = 0; kw < kernel; ++kw) {
      const index_t iw = ow * stride - s.padding + kw;
      if (iw < 0 || iw >= width) continue;
      const float value = static_cast<float>(plane[ih * width + iw]);
      // The first maximum in scan order wins and NaN propagates, as in torch's max_pool2d.
      if (best_index < 0 || value > best_value || isnan(value)) {
        best = plane[ih * width + iw];
        best_value = value;
        best_index = kh * kernel + kw;
      }
    }
  }
  out[o] = best;
  index[o] = static_cast<int8_t>(best_index);
}

// The first window (oh * stride - padding <= i) and the last (i < oh * stride - padding + kernel)
// that input row or column i lies in, within [0, count).
template <typename index_t, typename Divider>
__device__ __forceinline__ void windows_of(index_t i, index_t count, const PoolShape<Divider>& s,
                                           index_t& first, index_t& last) {
  const index_t stride = s.stride.divisor, kernel = s.kernel.divisor;
  const index_t lowest = i + s.padding + stride - kernel;  // a ceiling division's numerator
  first = lowest > 0 ? s.stride.quotient(lowest) : 0;
  last = s.stride.quotient(i + s.padding);
  last = last < count - 1 ? last : count - 1;
}

// Each input value gathers the gradients of the windows whose winner it is, in the order of the
// windows (as the CPU kernel adds them), so the sums need no atomics and are the same on both devices.
template <typename scalar_t, typename index_t, typename Divider>
__global__ void maxpool_backward_kernel(const scalar_t* __restrict__ grad_out, const int8_t* __restrict__ index,
                                        scalar_t* __restrict__ grad_in, index_t planes, PoolShape<Divider> s) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  const index_t out_h = s.out_h.divisor, out_w = s.out_w.divisor, height = s.height.divisor,
                width = s.width.divisor;
  const int kernel = s.kernel.divisor, stride = s.stride.divisor;
  if (i >= planes * height * width) return;
  const index_t row = s.width.quotient(i), iw = i - row * width;
  const index_t p = s.height.quotient(row), ih = row - p * height;
  index_t oh0, oh1, ow0, ow1;
  windows_of(ih, out_h, s, oh0, oh1);
  windows_of(iw, out_w, s, ow0, ow1);
  scalar_t sum = scalar_t(0.0f);
  for (index_t oh = oh0; oh <= oh1; ++oh) {
    for (index_t ow = ow0; ow <= ow1; ++ow) {
      const index_t o = (p * out_h + oh) * out_w + ow;
      const int k = index[o];
      const int kh = static_cast<int>(s.kernel.quotient(k)), kw = k - kh * kernel;
      if (k >= 0 && oh * stride - s.padding + kh == ih && ow * stride - s.padding + kw == iw) {
        sum = static_cast<scalar_t>(__fadd_rn(static_cast<float>(sum), static_cast<float>(grad_out[o])));
      }
    }
  }
  grad_in[i] = sum;
}

// Calls f(int32_t()) where every index below `n`, and a thread's index in the last block, fits 32
// bits (below 2^31, as the fast division needs), else f(int64_t()).
template <typename F>
void dispatch_index(int64_t n, F&& f) {
  if (n <= std::numeric_limits<int32_t>::max() - kThreads) {
    f(int32_t());
  } else {
    f(int64_t());
  }
}

template <typename index_t>
auto pool_shape(int64_t height, int64_t width, int64_t out_h, int64_t out_w, int64_t kernel, int64_t stride,
                int64_t padding) {
  using Divider = decltype(divider<index_t>(1));
  return PoolShape<Divider>{divider<index_t>(height), divider<index_t>(width), divider<index_t>(out_h),
                            divider<index_t>(out_w),  divider<index_t>(kernel), divider<index_t>(stride),
                            static_cast<int>(padding)};
}

}  // namespace

PlaneShape plane_shape(int64_t height, int64_t width, int64_t block) {
  TORCH_CHECK(height <= kMaxWidth && width <= kMaxWidth, "planes of more than ", kMaxWidth,
              " rows or columns are not supported on CUDA");
  int64_t tile_h, tile_w;
  membench::lfc_tile(height, width, block, tile_h, tile_w);
  PlaneShape s;
  s.height = static_cast<int>(height);
  s.width = static_cast<int>(width);
  s.tile_h = static_cast<int>(tile_h);
  s.tile_w = static_cast<int>(tile_w);
  s.rows = static_cast<int>((height + tile_h - 1) / tile_h);
  s.cols = static_cast<int>((width + tile_w - 1) / tile_w);
  s.area = static_cast<int>(height * width);
  s.by_cols = divider<int32_t>(s.cols);
  return s;
}

std::vector<at::Tensor> division_compress_cuda(at::Tensor x, int64_t block, int64_t bits, int64_t seed,
                                               int64_t offset) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t planes = x.size(0) * x.size(1);
  const PlaneShape s = plane_shape(x.size(2), x.size(3), block);
  const auto bf16 = x.options().dtype(at::kBFloat16);
  auto lfc = at::empty({x.size(0), x.size(1), s.rows, s.cols}, bf16);
  auto packed = at::empty({planes, packed_row_bytes(s.area, bits)}, x.options().dtype(at::kByte));
  auto minimum = at::empty({planes}, bf16);
  auto scale = at::empty({planes}, bf16);
  if (planes == 0 || s.area == 0) return {lfc, packed, minimum, scale};
  const int64_t element = x.element_size();
  const int lanes = team_lanes(s.area);
  const int run = tile_run(s, lanes, x.data_ptr(), element);
  const Launch launch =
      team_launch(x, lanes, plane_tables_bytes(s),
                  stageable(x) && stage_bytes(static_cast<int64_t>(s.area) * element) <= kMaxStage,
                  [&](bool staged) { return plane_team_bytes(s, element, staged, lanes, run); });
  const bool whole_blocks = membench::noise_calls(s.area, kPerCall) == membench::kNoiseCalls;
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "division_compress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? (whole_blocks ? division_compress_kernel<scalar_t, kBits, true, true>
                                                  : division_compress_kernel<scalar_t, kBits, true, false>)
                                  : (whole_blocks ? division_compress_kernel<scalar_t, kBits, false, true>
                                                  : division_compress_kernel<scalar_t, kBits, false, false>);
      const int64_t blocks = prepare_launch(kernel, launch, planes, x);
      launch_kernel(kernel, blocks, 32 * launch.warps, launch.shared, x.data_ptr<scalar_t>(), planes, s,
                    launch.lanes, run, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset),
                    lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
                    scale.data_ptr<c10::BFloat16>());
    });
  });
  return {lfc, packed, minimum, scale};
}

at::Tensor division_decompress_cuda(at::Tensor lfc, at::Tensor packed, at::Tensor minimum, at::Tensor scale,
                                    int64_t block, int64_t bits, int64_t height, int64_t width, at::ScalarType dtype) {
  const c10::cuda::CUDAGuard device_guard(packed.device());
  const int64_t planes = lfc.size(0) * lfc.size(1);
  const PlaneShape s = plane_shape(height, width, block);
  auto out = at::empty({lfc.size(0), lfc.size(1), height, width}, packed.options().dtype(dtype));
  if (out.numel() == 0) return out;
  const int b = static_cast<int>(bits);
  const Launch launch = team_launch(packed, team_lanes(s.area), plane_tables_bytes(s),
                                    stageable(packed) && unpack_team_bytes(s, b, true) <= kMaxStage,
                                    [&](bool staged) { return unpack_team_bytes(s, b, staged); });
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "division_decompress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? division_decompress_kernel<scalar_t, kBits, true>
                                  : division_decompress_kernel<scalar_t, kBits, false>;
      const int64_t blocks = prepare_launch(kernel, launch, planes, packed);
      launch_kernel(kernel, blocks, 32 * launch.warps, launch.shared, lfc.data_ptr<c10::BFloat16>(),
                    packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>(),
                    planes, s, launch.lanes, unpack_run(s, bits, packed), out.data_ptr<scalar_t>());
    });
  });
  return out;
}

std::vector<at::Tensor> group_compress_cuda(at::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
                                            int64_t offset) {
  TORCH_CHECK(group_size < (int64_t{1} << 30), "groups of 2^30 values or more are not supported on CUDA");
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t numel = x.numel(), groups = (numel + group_size - 1) / group_size;
  const auto bf16 = x.options().dtype(at::kBFloat16);
  auto packed = at::empty({groups, packed_row_bytes(group_size, bits)}, x.options().dtype(at::kByte));
  auto minimum = at::empty({groups}, bf16);
  auto scale = at::empty({groups}, bf16);
  if (groups == 0) return {packed, minimum, scale};
  const int64_t element = x.element_size();
  const int lanes = team_lanes(group_size);
  const Launch launch =
      team_launch(x, lanes, 0, stageable(x) && stage_bytes(group_size * element) <= kMaxStage,
                  [&](bool staged) { return group_team_bytes(group_size, element, staged, lanes); });
  const bool whole_blocks = membench::noise_calls(group_size, kPerCall) == membench::kNoiseCalls;
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "group_compress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? (whole_blocks ? group_compress_kernel<scalar_t, kBits, true, true>
                                                  : group_compress_kernel<scalar_t, kBits, true, false>)
                                  : (whole_blocks ? group_compress_kernel<scalar_t, kBits, false, true>
                                                  : group_compress_kernel<scalar_t, kBits, false, false>);
      const int64_t blocks = prepare_launch(kernel, launch, groups, x);
      launch_kernel(kernel, blocks, 32 * launch.warps, launch.shared, x.data_ptr<scalar_t>(), numel, group_size,
                    groups, launch.lanes, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset),
                    packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>());
    });
  });
  return {packed, minimum, scale};
}

at::Tensor group_decompress_cuda(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t group_size,
                                 int64_t bits, int64_t numel, at::ScalarType dtype) {
  TORCH_CHECK(group_size < (int64_t{1} << 30), "groups of 2^30 values or more are not supported on CUDA");
  const c10::cuda::CUDAGuard device_guard(packed.device());
  const int64_t groups = (numel + group_size - 1) / group_size;
  auto out = at::empty({numel}, packed.options().dtype(dtype));
  if (numel == 0) return out;
  const bool in_runs = group_size % 8 == 0 && reinterpret_cast<uintptr_t>(packed.data_ptr()) % 8 == 0;
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "group_decompress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      launch_kernel(group_decompress_kernel<scalar_t, decltype(bits_constant)::value>, (groups + kWarps - 1) / kWarps,
                    kThreads, 0, packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
                    scale.data_ptr<c10::BFloat16>(), numel, group_size, groups, in_runs, out.data_ptr<scalar_t>());
    });
  });
  return out;
}

std::vector<at::Tensor> relu_pack_cuda(at::Tensor x) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t numel = x.numel(), bytes = (numel + 7) / 8;
  auto out = at::empty(x.sizes(), x.options());
  auto packed = at::empty({bytes}, x.options().dtype(at::kByte));
  if (numel == 0) return {out, packed};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "relu_pack_cuda", [&] {
    auto kernel = in_eights(x) ? relu_pack_kernel<scalar_t, true> : relu_pack_kernel<scalar_t, false>;
    launch_kernel(kernel, blocks_for(bytes), kThreads, 0, x.data_ptr<scalar_t>(), numel, out.data_ptr<scalar_t>(),
                  packed.data_ptr<uint8_t>());
  });
  return {out, packed};
}

std::vector<at::Tensor> dropout_pack_cuda(at::Tensor x, double p, int64_t seed, int64_t offset) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t numel = x.numel();
  auto out = at::empty(x.sizes(), x.options());
  auto packed = at::empty({(numel + 7) / 8}, x.options().dtype(at::kByte));
  if (numel == 0) return {out, packed};
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "dropout_pack_cuda", [&] {
    launch_kernel(dropout_pack_kernel<scalar_t>, (numel + kBlockValues - 1) / kBlockValues, kThreads, kBlockValues,
                  x.data_ptr<scalar_t>(), numel, static_cast<float>(p), static_cast<float>(1.0 / (1.0 - p)),
                  static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), out.data_ptr<scalar_t>(),
                  packed.data_ptr<uint8_t>());
  });
  return {out, packed};
}

at::Tensor masked_grad_cuda(at::Tensor grad_out, at::Tensor packed, double gain) {
  const c10::cuda::CUDAGuard device_guard(grad_out.device());
  const int64_t numel = grad_out.numel();
  auto grad_in = at::empty(grad_out.sizes(), grad_out.options());
  if (numel == 0) return grad_in;
  MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "masked_grad_cuda", [&] {
    const bool eights = in_eights(grad_out);
    auto kernel = eights ? masked_grad_kernel<scalar_t, true> : masked_grad_kernel<scalar_t, false>;
    launch_kernel(kernel, blocks_for(eights ? numel / 8 : numel), kThreads, 0, grad_out.data_ptr<scalar_t>(),
                  packed.data_ptr<uint8_t>(), numel, static_cast<float>(gain), grad_in.data_ptr<scalar_t>());
  });
  return grad_in;
}

std::vector<at::Tensor> maxpool2d_forward_cuda(at::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = (height + 2 * padding - kernel) / stride + 1, out_w = (width + 2 * padding - kernel) / stride + 1;
  auto out = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  auto index = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options().dtype(at::kChar));
  const int64_t n = planes * out_h * out_w;
  if (n == 0) return {out, index};
  dispatch_index(max64(n, planes * height * width), [&](auto index_type) {
    using index_t = decltype(index_type);
    const auto shape = pool_shape<index_t>(height, width, out_h, out_w, kernel, stride, padding);
    MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "maxpool2d_forward_cuda", [&] {
      launch_kernel(maxpool_forward_kernel<scalar_t, index_t, typename decltype(shape)::Divider>, blocks_for(n),
                    kThreads, 0, x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(),
                    static_cast<index_t>(planes), shape);
    });
  });
  return {out, index};
}

at::Tensor maxpool2d_backward_cuda(at::Tensor grad_out, at::Tensor index, int64_t height, int64_t width,
                                   int64_t kernel, int64_t stride, int64_t padding) {
  const c10::cuda::CUDAGuard device_guard(grad_out.device());
  const int64_t planes = grad_out.size(0) * grad_out.size(1), out_h = grad_out.size(2), out_w = grad_out.size(3);
  auto grad_in = at::empty({grad_out.size(0), grad_out.size(1), height, width}, grad_out.options());
  const int64_t n = planes * height * width;
  if (n == 0) return grad_in;
  dispatch_index(max64(n, planes * out_h * out_w), [&](auto index_type) {
    using index_t = decltype(index_type);
    const auto shape = pool_shape<index_t>(height, width, out_h, out_w, kernel, stride, padding);
    MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "maxpool2d_backward_cuda", [&] {
      launch_kernel(maxpool_backward_kernel<scalar_t, index_t, typename decltype(shape)::Divider>,
                    blocks_for(n), kThreads, 0, grad_out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(),
                    grad_in.data_ptr<scalar_t>(), static_cast<index_t>(planes), shape);
    });
  });
  return grad_in;
}
