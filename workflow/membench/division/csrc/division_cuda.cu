// CUDA kernels of the activation compressors: the same layouts, noise and arithmetic as the CPU
// kernels (division_cpu.h) and the pure-torch reference, bit for bit. Built only when torch has
// CUDA and nvcc is present. nvcc is given --fmad=false, so multiplications and additions are not
// contracted into FMAs, which would change the rounding.
//
// Structure: DIVISION compresses one (sample, channel) plane per warp (tile means, the HFC's range,
// then stochastic rounding and packing); ActNN-style compresses one group per warp. A warp first
// copies its plane or group into shared memory with 16-byte loads where it fits (32 KiB), so that
// the three passes read memory once, at full width (staging, below); larger rows are read from
// global memory, which the caches hold between the passes. Dropout draws its mask per block of 2048
// values; every thread that draws noise runs one Philox call for its 8 values (division_common.h),
// and the levels go through shared memory to be packed into bytes. The 1-bit masks read and write
// eight values at once where a map's layout allows.
//
// Only ATen's tensor, dispatch and per-operator headers and c10/cuda's stream, guard and exception
// headers are used: ATen/cuda/CUDAContext.h pulls in cuBLAS/cuSPARSE headers that a bare CUDA
// toolkit lacks, and torch's Python headers (the bindings, in division_ops.cpp) would only slow nvcc
// down. Every launch runs on the inputs' device (a device guard) and its current stream.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

#include "division_common.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Values whose levels a block holds at once: one Philox call (8 values) per thread.
constexpr int kBlockValues = 8 * kThreads;
constexpr int kMaxWidth = 4096;  // a plane's rows and columns (tables and column sums in shared memory)

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

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

__device__ __forceinline__ float call_uniform(const membench::Philox4& r, int v) {
  return membench::uniform_from_half((r.word[v / 2] >> (16 * (v % 2))) & 0xFFFFu);
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

__device__ __forceinline__ void range_add(Range& r, float v) {
  r.minimum = v < r.minimum ? v : r.minimum;
  r.maximum = v > r.maximum ? v : r.maximum;
  r.nan |= v != v;
}

// Merges another range (an empty one is (+inf, -inf): its bounds are not values).
__device__ __forceinline__ void range_merge(Range& r, float minimum, float maximum, int nan) {
  r.minimum = minimum < r.minimum ? minimum : r.minimum;
  r.maximum = maximum > r.maximum ? maximum : r.maximum;
  r.nan |= nan;
}

__device__ __forceinline__ Range warp_range(Range r) {
  for (int delta = 16; delta > 0; delta /= 2) {
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

// -- Staging: a warp's row of a map copied into shared memory with 16-byte loads ------------------
//
// Read one value per lane at a time, a warp has 64 or 128 bytes in flight, far too few to keep
// an H100's memory busy. A warp whose row fits copies it first, each lane moving 16 bytes per
// load, four loads at a time, and the passes over the row then read shared memory. The loads are
// aligned: they start at the 16-byte boundary at or below the row and end at the one at or above
// its end, so the host stages only tensors whose data is 16-byte aligned and whose storage reaches
// the boundary past their last byte (stageable()); the bytes around a row that it reads are not used.

__host__ __device__ __forceinline__ int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Shared bytes that hold a staged row of `bytes` bytes wherever it starts.
__host__ __device__ __forceinline__ int64_t stage_bytes(int64_t bytes) { return align16(bytes) + 16; }

// A row is staged up to this size; longer rows are read from global memory.
constexpr int64_t kMaxStage = 32 * 1024;

// Copies bytes [begin, begin + count) into `buffer` (16-byte aligned, stage_bytes(count) long) and
// returns where `begin` landed; the warp's lanes are synchronised on return.
__device__ __forceinline__ const unsigned char* warp_stage(const unsigned char* begin, int64_t count,
                                                           unsigned char* buffer, int lane) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~static_cast<uintptr_t>(15);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + count + 15) & ~static_cast<uintptr_t>(15);
  const uint4* from = reinterpret_cast<const uint4*>(first);
  uint4* to = reinterpret_cast<uint4*>(buffer);
  const int words = static_cast<int>((last - first) / 16);
#pragma unroll 4
  for (int i = lane; i < words; i += 32) to[i] = __ldg(from + i);
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

// A launch's warps per block, its dynamic shared bytes and whether its rows are staged.
struct Launch {
  int warps;
  int64_t shared;
  bool staged;
};

// Lets `kernel` take `launch.shared` bytes (above 48 KiB a kernel must ask for them).
template <typename Kernel>
void allow_shared(Kernel kernel, const Launch& launch) {
  if (launch.shared > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(launch.shared)));
  }
}

// -- DIVISION: one warp per (sample, channel) plane ----------------------------------------------
//
// A block holds up to kWarps planes. Its shared memory: the tile row and column of each row and
// column of a plane (uint16, shared by the block's planes, which have one size), then per warp its
// region: when staged, the plane; the sums, minima and maxima of a tile row's columns (width floats
// each); when staged, the plane's LFC as floats; the levels of 256 values. In-plane indices are 32-bit (a plane has fewer than 2^31
// values; the host checks); a cursor (h, w) follows a value index j = h * width + w as it advances,
// so that no value needs a division.

struct PlaneShape {
  int height, width, tile_h, tile_w, rows, cols, area;
};

__host__ __device__ __forceinline__ int64_t plane_tables_bytes(int height, int width) {
  return align16(static_cast<int64_t>(height + width) * 2);
}

__host__ __device__ __forceinline__ int64_t plane_stage_bytes(const PlaneShape& s, int64_t element, bool staged) {
  return staged ? stage_bytes(static_cast<int64_t>(s.area) * element) : 0;
}

__host__ __device__ __forceinline__ int64_t plane_lfc_bytes(const PlaneShape& s, bool staged) {
  return staged ? align16(static_cast<int64_t>(s.rows) * s.cols * 4) : 0;
}

__host__ __device__ __forceinline__ int64_t plane_column_bytes(const PlaneShape& s) {
  return align16(static_cast<int64_t>(s.width) * 4);
}

__host__ __device__ __forceinline__ int64_t plane_warp_bytes(const PlaneShape& s, int64_t element, bool staged) {
  return plane_stage_bytes(s, element, staged) + 3 * plane_column_bytes(s) + plane_lfc_bytes(s, staged) + 256;
}

// Staged when the map allows and a warp's region fits; else every pass reads global memory.
Launch plane_launch(const at::Tensor& x, const PlaneShape& s) {
  const int64_t tables = plane_tables_bytes(s.height, s.width), element = x.element_size();
  if (stageable(x) && stage_bytes(static_cast<int64_t>(s.area) * element) <= kMaxStage) {
    const int warps = warps_that_fit(x, tables, plane_warp_bytes(s, element, true));
    if (warps > 0) return {warps, tables + warps * plane_warp_bytes(s, element, true), true};
  }
  const int warps = warps_that_fit(x, tables, plane_warp_bytes(s, element, false));
  TORCH_CHECK(warps > 0, "planes of ", s.height, "x", s.width, " values do not fit the GPU's shared memory");
  return {warps, tables + warps * plane_warp_bytes(s, element, false), false};
}

// Fills the tile tables (the whole block) and returns this warp's plane, or -1 past the last.
__device__ __forceinline__ int64_t plane_setup(const PlaneShape& s, int64_t planes, uint16_t* row_tile,
                                               uint16_t* col_tile) {
  for (int i = threadIdx.x; i < s.height; i += blockDim.x) row_tile[i] = static_cast<uint16_t>(i / s.tile_h);
  for (int i = threadIdx.x; i < s.width; i += blockDim.x) col_tile[i] = static_cast<uint16_t>(i / s.tile_w);
  __syncthreads();  // the only block-wide barrier: warps work on their own planes from here
  const int64_t p = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  return p < planes ? p : -1;
}

// (h, w) of value j, advanced by a fixed step (dh rows and dw < width columns).
struct Cursor {
  int h, w;
  __device__ __forceinline__ void advance(int dh, int dw, int width) {
    h += dh;
    w += dw;
    if (w >= width) {
      w -= width;
      ++h;
    }
  }
};

template <typename scalar_t, int BITS, bool STAGED>
__global__ void division_compress_kernel(const scalar_t* __restrict__ x, int64_t planes, PlaneShape s, uint64_t seed,
                                         uint64_t offset, c10::BFloat16* __restrict__ lfc,
                                         uint8_t* __restrict__ packed, c10::BFloat16* __restrict__ minimum,
                                         c10::BFloat16* __restrict__ scale) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int64_t element = sizeof(scalar_t);
  uint16_t* row_tile = reinterpret_cast<uint16_t*>(shared);
  uint16_t* col_tile = row_tile + s.height;
  unsigned char* own =
      shared + plane_tables_bytes(s.height, s.width) + (threadIdx.x / 32) * plane_warp_bytes(s, element, STAGED);
  float* column_sum = reinterpret_cast<float*>(own + plane_stage_bytes(s, element, STAGED));
  float* column_min = column_sum + plane_column_bytes(s) / 4;
  float* column_max = column_min + plane_column_bytes(s) / 4;
  float* lfc_values = column_max + plane_column_bytes(s) / 4;
  uint8_t* levels = reinterpret_cast<uint8_t*>(lfc_values) + plane_lfc_bytes(s, STAGED);
  const int64_t p = plane_setup(s, planes, row_tile, col_tile);
  if (p < 0) return;
  const int lane = threadIdx.x % 32;
  const scalar_t* plane = x + p * s.area;
  if constexpr (STAGED) {
    plane = reinterpret_cast<const scalar_t*>(
        warp_stage(reinterpret_cast<const unsigned char*>(plane), s.area * element, own, lane));
  }
  c10::BFloat16* plane_lfc = lfc + p * s.rows * s.cols;
  // The bfloat16 LFC value of tile t, as a float.
  auto tile_mean = [&](int t) -> float {
    if constexpr (STAGED) {
      return lfc_values[t];
    } else {
      return static_cast<float>(plane_lfc[t]);
    }
  };
  // Tile means and the HFC's range in one pass: each column of a tile row summed downwards (and its
  // minimum and maximum kept), then the columns of a tile. Rounding is monotonic, so the least HFC
  // of a tile, min(x - mean), is its least value minus the mean (likewise the greatest): the range
  // needs no pass of its own. A NaN anywhere makes the plane's range NaN.
  Range range{INFINITY, -INFINITY, 0};
  for (int tr = 0; tr < s.rows; ++tr) {
    const int h0 = tr * s.tile_h, h1 = h0 + s.tile_h < s.height ? h0 + s.tile_h : s.height;
    for (int w = lane; w < s.width; w += 32) {
      float sum = 0.0f, least = INFINITY, greatest = -INFINITY;
      for (int h = h0; h < h1; ++h) {
        const float v = static_cast<float>(plane[h * s.width + w]);
        sum = __fadd_rn(sum, v);
        least = v < least ? v : least;
        greatest = v > greatest ? v : greatest;
        range.nan |= v != v;
      }
      column_sum[w] = sum;
      column_min[w] = least;
      column_max[w] = greatest;
    }
    __syncwarp();
    for (int tc = lane; tc < s.cols; tc += 32) {
      const int w0 = tc * s.tile_w, w1 = w0 + s.tile_w < s.width ? w0 + s.tile_w : s.width;
      float sum = 0.0f, least = INFINITY, greatest = -INFINITY;
      for (int w = w0; w < w1; ++w) {
        sum = __fadd_rn(sum, column_sum[w]);
        least = column_min[w] < least ? column_min[w] : least;
        greatest = column_max[w] > greatest ? column_max[w] : greatest;
      }
      const c10::BFloat16 mean(__fdiv_rn(sum, static_cast<float>((h1 - h0) * (w1 - w0))));
      plane_lfc[tr * s.cols + tc] = mean;
      const float mean_value = static_cast<float>(mean);
      if constexpr (STAGED) lfc_values[tr * s.cols + tc] = mean_value;
      const float hfc_least = __fsub_rn(least, mean_value), hfc_greatest = __fsub_rn(greatest, mean_value);
      range_merge(range, hfc_least, hfc_greatest, (hfc_least != hfc_least) | (hfc_greatest != hfc_greatest));
    }
    __syncwarp();  // the column arrays are reused, the LFC is read by the whole warp
  }
  const membench::Grid grid = range_grid(warp_range(range), BITS);  // the same on every lane
  if (lane == 0) {
    minimum[p] = grid.low;
    scale[p] = grid.step;
  }
  const float low = static_cast<float>(grid.low), step = static_cast<float>(grid.step);
  const float top = static_cast<float>((1 << BITS) - 1);
  uint8_t* row_out = packed + p * packed_row_bytes(s.area, BITS);
  // Stochastic rounding, 256 values at a time: a Philox call per lane serves values j0 + calls * v,
  // v < 8 (division_common.h; a plane of at most 64 values is one block of fewer calls).
  const int calls = membench::noise_calls(s.area);
  const int noise_h = calls / s.width, noise_w = calls % s.width;
  for (int begin = 0; begin < s.area; begin += 256) {
    const int64_t call = begin / 8 + lane;
    const membench::Philox4 r = philox_call(seed, offset, static_cast<uint32_t>(p), call);
    const int j0 = static_cast<int>(membench::noise_value(call, 0, calls));
    Cursor value{j0 / s.width, j0 % s.width};
    for (int v = 0; v < 8; ++v) {
      const int j = j0 + calls * v;
      uint8_t level = 0;
      if (j < s.area) {
        const float mean = tile_mean(row_tile[value.h] * s.cols + col_tile[value.w]);
        const float hfc = __fsub_rn(static_cast<float>(plane[j]), mean);
        level = static_cast<uint8_t>(membench::quantize_level(hfc, low, step, call_uniform(r, v), top));
      }
      levels[j - begin] = level;
      value.advance(noise_h, noise_w, s.width);
    }
    __syncwarp();
    pack_levels<BITS>(levels, min64(256, s.area - begin), row_out + begin / (8 / BITS), lane, 32);
    __syncwarp();
  }
}

// Decompression's warp region: when staged, the packed row and the LFC as floats.
__host__ __device__ __forceinline__ int64_t unpack_warp_bytes(const PlaneShape& s, int bits, bool staged) {
  return staged ? stage_bytes(packed_row_bytes(s.area, bits)) + plane_lfc_bytes(s, true) : 0;
}

template <typename scalar_t, int BITS, bool STAGED>
__global__ void division_decompress_kernel(const c10::BFloat16* __restrict__ lfc, const uint8_t* __restrict__ packed,
                                           const c10::BFloat16* __restrict__ minimum,
                                           const c10::BFloat16* __restrict__ scale, int64_t planes, PlaneShape s,
                                           scalar_t* __restrict__ out) {
  constexpr int per_byte = 8 / BITS;
  extern __shared__ __align__(16) unsigned char shared[];
  uint16_t* row_tile = reinterpret_cast<uint16_t*>(shared);
  uint16_t* col_tile = row_tile + s.height;
  unsigned char* own =
      shared + plane_tables_bytes(s.height, s.width) + (threadIdx.x / 32) * unpack_warp_bytes(s, BITS, STAGED);
  const int64_t p = plane_setup(s, planes, row_tile, col_tile);
  if (p < 0) return;
  const int lane = threadIdx.x % 32;
  const c10::BFloat16* plane_lfc = lfc + p * s.rows * s.cols;
  const int64_t row_bytes = packed_row_bytes(s.area, BITS);
  const uint8_t* row = packed + p * row_bytes;
  float* lfc_values = reinterpret_cast<float*>(own + (STAGED ? stage_bytes(row_bytes) : 0));
  if constexpr (STAGED) {
    for (int t = lane; t < s.rows * s.cols; t += 32) lfc_values[t] = static_cast<float>(plane_lfc[t]);
    row = warp_stage(row, row_bytes, own, lane);  // synchronises the warp: the LFC is written too
  }
  auto tile_mean = [&](int t) -> float {
    if constexpr (STAGED) {
      return lfc_values[t];
    } else {
      return static_cast<float>(plane_lfc[t]);
    }
  };
  const float low = static_cast<float>(minimum[p]), step = static_cast<float>(scale[p]);
  Cursor at{lane / s.width, lane % s.width};
  const int step_h = 32 / s.width, step_w = 32 % s.width;
  scalar_t* plane_out = out + p * s.area;
  for (int j = lane; j < s.area; j += 32) {
    const int level = (row[j / per_byte] >> ((j % per_byte) * BITS)) & ((1 << BITS) - 1);
    const float hfc = __fadd_rn(__fmul_rn(static_cast<float>(level), step), low);
    const float mean = tile_mean(row_tile[at.h] * s.cols + col_tile[at.w]);
    plane_out[j] = static_cast<scalar_t>(__fadd_rn(hfc, mean));
    at.advance(step_h, step_w, s.width);
  }
}

// -- ActNN-style: one warp per group --------------------------------------------------------------
//
// Per warp in shared memory: when staged, the group; the levels of 256 values.

__host__ __device__ __forceinline__ int64_t group_warp_bytes(int64_t group_size, int64_t element, bool staged) {
  return (staged ? stage_bytes(group_size * element) : 0) + 256;
}

template <typename scalar_t, int BITS, bool STAGED>
__global__ void group_compress_kernel(const scalar_t* __restrict__ x, int64_t numel, int64_t group_size,
                                      int64_t groups, uint64_t seed, uint64_t offset, uint8_t* __restrict__ packed,
                                      c10::BFloat16* __restrict__ minimum, c10::BFloat16* __restrict__ scale) {
  constexpr int kWarpValues = 8 * 32;
  constexpr int64_t element = sizeof(scalar_t);
  extern __shared__ __align__(16) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (g >= groups) return;  // a whole warp leaves: no block-wide barrier follows
  unsigned char* own = shared + warp * group_warp_bytes(group_size, element, STAGED);
  uint8_t* levels = own + (STAGED ? stage_bytes(group_size * element) : 0);
  // In-group indices are 32-bit (the host checks the group size): 64-bit index arithmetic would
  // double the instructions per value of a kernel that is bound by them.
  const int64_t base = g * group_size;
  const int size = static_cast<int>(group_size), count = static_cast<int>(min64(group_size, numel - base));
  const scalar_t* values = x + base;
  if constexpr (STAGED) {
    values = reinterpret_cast<const scalar_t*>(
        warp_stage(reinterpret_cast<const unsigned char*>(values), count * element, own, lane));
  }
  // The range, with the zero padding of the last group.
  Range range{INFINITY, -INFINITY, 0};
  for (int k = lane; k < count; k += 32) range_add(range, static_cast<float>(values[k]));
  if (count < size) range_add(range, 0.0f);
  range = warp_range(range);
  const membench::Grid grid = range_grid(range, BITS);
  if (lane == 0) {
    minimum[g] = grid.low;
    scale[g] = grid.step;
  }
  const float low = static_cast<float>(grid.low), step = static_cast<float>(grid.step);
  const float top = static_cast<float>((1 << BITS) - 1);
  uint8_t* row_out = packed + g * packed_row_bytes(group_size, BITS);
  const int calls = membench::noise_calls(size);
  for (int begin = 0; begin < size; begin += kWarpValues) {
    const int call = begin / 8 + lane;
    const membench::Philox4 r = philox_call(seed, offset, static_cast<uint32_t>(g), call);
    const int k0 = (call / calls) * 8 * calls + call % calls;
    for (int v = 0; v < 8; ++v) {
      const int k = k0 + calls * v;  // membench::noise_value(call, v, calls)
      const float value = k < count ? static_cast<float>(values[k]) : 0.0f;
      levels[k - begin] =
          k < size ? static_cast<uint8_t>(membench::quantize_level(value, low, step, call_uniform(r, v), top)) : 0;
    }
    __syncwarp();
    pack_levels<BITS>(levels, min64(kWarpValues, size - begin), row_out + begin / (8 / BITS), lane, 32);
    __syncwarp();
  }
}

template <typename scalar_t, int BITS>
__global__ void group_decompress_kernel(const uint8_t* __restrict__ packed, const c10::BFloat16* __restrict__ minimum,
                                        const c10::BFloat16* __restrict__ scale, int64_t numel, int64_t group_size,
                                        int64_t groups, scalar_t* __restrict__ out) {
  constexpr int per_byte = 8 / BITS;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (g >= groups) return;
  const int64_t base = g * group_size, count = min64(group_size, numel - base);
  const uint8_t* row = packed + g * packed_row_bytes(group_size, BITS);
  const float low = static_cast<float>(minimum[g]), step = static_cast<float>(scale[g]);
  for (int64_t k = threadIdx.x % 32; k < count; k += 32) {
    const int level = (row[k / per_byte] >> ((k % per_byte) * BITS)) & ((1 << BITS) - 1);
    out[base + k] = static_cast<scalar_t>(__fadd_rn(__fmul_rn(static_cast<float>(level), step), low));
  }
}

// -- 1-bit masks ------------------------------------------------------------------------------------

// Eight values of a map, loaded or stored at once (one or two 16-byte accesses).
template <typename scalar_t>
struct alignas(8 * sizeof(scalar_t)) Values8 {
  scalar_t v[8];
};

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
    const Values8<scalar_t> in = reinterpret_cast<const Values8<scalar_t>*>(x)[b];
    Values8<scalar_t> kept;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = static_cast<float>(in.v[i]);
      kept.v[i] = static_cast<scalar_t>(__fmul_rn(v, v > 0.0f ? 1.0f : 0.0f));
      byte |= static_cast<uint8_t>(v > 0.0f) << i;
    }
    reinterpret_cast<Values8<scalar_t>*>(out)[b] = kept;
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
  __shared__ uint8_t keep[kBlockValues];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kBlockValues;
  const int64_t call = begin / 8 + threadIdx.x;
  const int calls = membench::noise_calls(numel);
  const membench::Philox4 r = philox_call(seed, offset, 0, call);
  for (int v = 0; v < 8; ++v) {
    const int64_t j = membench::noise_value(call, v, calls);
    const bool kept = call_uniform(r, v) >= p;
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
    const Values8<scalar_t> grad = reinterpret_cast<const Values8<scalar_t>*>(grad_out)[j];
    Values8<scalar_t> result;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float keep = (byte >> i) & 1 ? 1.0f : 0.0f;
      result.v[i] = static_cast<scalar_t>(__fmul_rn(__fmul_rn(static_cast<float>(grad.v[i]), keep), gain));
    }
    reinterpret_cast<Values8<scalar_t>*>(grad_in)[j] = result;
  } else {
    if (j >= numel) return;
    const float keep = (packed[j / 8] >> (j % 8)) & 1 ? 1.0f : 0.0f;
    grad_in[j] = static_cast<scalar_t>(__fmul_rn(__fmul_rn(static_cast<float>(grad_out[j]), keep), gain));
  }
}

// -- max pooling with window indices --------------------------------------------------------------

template <typename scalar_t>
__global__ void maxpool_forward_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                                       int8_t* __restrict__ index, int64_t planes, int64_t height, int64_t width,
                                       int64_t out_h, int64_t out_w, int kernel, int stride, int padding) {
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= planes * out_h * out_w) return;
  const int64_t p = o / (out_h * out_w), oh = (o / out_w) % out_h, ow = o % out_w;
  const scalar_t* plane = x + p * height * width;
  scalar_t best = plane[0];
  float best_value = -INFINITY;
  int best_index = -1;
  for (int kh = 0; kh < kernel; ++kh) {
    const int64_t ih = oh * stride - padding + kh;
    if (ih < 0 || ih >= height) continue;
    for (int kw = 0; kw < kernel; ++kw) {
      const int64_t iw = ow * stride - padding + kw;
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

// Each input value gathers the gradients of the windows whose winner it is, in the order of the
// windows (as the CPU kernel adds them), so the sums need no atomics and are the same on both devices.
template <typename scalar_t>
__global__ void maxpool_backward_kernel(const scalar_t* __restrict__ grad_out, const int8_t* __restrict__ index,
                                        scalar_t* __restrict__ grad_in, int64_t planes, int64_t height,
                                        int64_t width, int64_t out_h, int64_t out_w, int kernel, int stride,
                                        int padding) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= planes * height * width) return;
  const int64_t p = i / (height * width), ih = (i / width) % height, iw = i % width;
  // Windows oh with oh * stride - padding <= ih < oh * stride - padding + kernel.
  const int64_t oh0 = max64(0, (ih + padding - kernel + stride) / stride);
  const int64_t oh1 = min64(out_h - 1, (ih + padding) / stride);
  const int64_t ow0 = max64(0, (iw + padding - kernel + stride) / stride);
  const int64_t ow1 = min64(out_w - 1, (iw + padding) / stride);
  scalar_t sum = scalar_t(0.0f);
  for (int64_t oh = oh0; oh <= oh1; ++oh) {
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      const int64_t o = (p * out_h + oh) * out_w + ow;
      const int k = index[o];
      if (oh * stride - padding + k / kernel == ih && ow * stride - padding + k % kernel == iw) {
        sum = static_cast<scalar_t>(__fadd_rn(static_cast<float>(sum), static_cast<float>(grad_out[o])));
      }
    }
  }
  grad_in[i] = sum;
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
  const Launch launch = plane_launch(x, s);
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "division_compress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? division_compress_kernel<scalar_t, kBits, true>
                                  : division_compress_kernel<scalar_t, kBits, false>;
      allow_shared(kernel, launch);
      kernel<<<(planes + launch.warps - 1) / launch.warps, 32 * launch.warps, launch.shared, stream()>>>(
          x.data_ptr<scalar_t>(), planes, s, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset),
          lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
          scale.data_ptr<c10::BFloat16>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  const int64_t tables = plane_tables_bytes(s.height, s.width);
  Launch launch{kWarps, tables, false};
  if (stageable(packed) && unpack_warp_bytes(s, static_cast<int>(bits), true) <= kMaxStage) {
    const int warps = warps_that_fit(packed, tables, unpack_warp_bytes(s, static_cast<int>(bits), true));
    if (warps > 0) launch = {warps, tables + warps * unpack_warp_bytes(s, static_cast<int>(bits), true), true};
  }
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "division_decompress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? division_decompress_kernel<scalar_t, kBits, true>
                                  : division_decompress_kernel<scalar_t, kBits, false>;
      allow_shared(kernel, launch);
      kernel<<<(planes + launch.warps - 1) / launch.warps, 32 * launch.warps, launch.shared, stream()>>>(
          lfc.data_ptr<c10::BFloat16>(), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
          scale.data_ptr<c10::BFloat16>(), planes, s, out.data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  Launch launch{kWarps, kWarps * group_warp_bytes(group_size, element, false), false};
  if (stageable(x) && stage_bytes(group_size * element) <= kMaxStage) {
    const int warps = warps_that_fit(x, 0, group_warp_bytes(group_size, element, true));
    if (warps > 0) launch = {warps, warps * group_warp_bytes(group_size, element, true), true};
  }
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "group_compress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      constexpr int kBits = decltype(bits_constant)::value;
      auto kernel = launch.staged ? group_compress_kernel<scalar_t, kBits, true>
                                  : group_compress_kernel<scalar_t, kBits, false>;
      allow_shared(kernel, launch);
      kernel<<<(groups + launch.warps - 1) / launch.warps, 32 * launch.warps, launch.shared, stream()>>>(
          x.data_ptr<scalar_t>(), numel, group_size, groups, static_cast<uint64_t>(seed),
          static_cast<uint64_t>(offset), packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(),
          scale.data_ptr<c10::BFloat16>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {packed, minimum, scale};
}

at::Tensor group_decompress_cuda(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t group_size,
                                 int64_t bits, int64_t numel, at::ScalarType dtype) {
  const c10::cuda::CUDAGuard device_guard(packed.device());
  const int64_t groups = (numel + group_size - 1) / group_size;
  auto out = at::empty({numel}, packed.options().dtype(dtype));
  if (numel == 0) return out;
  MEMBENCH_DISPATCH_MAP_TYPES(dtype, "group_decompress_cuda", [&] {
    dispatch_bits(bits, [&](auto bits_constant) {
      group_decompress_kernel<scalar_t, decltype(bits_constant)::value>
          <<<(groups + kWarps - 1) / kWarps, kThreads, 0, stream()>>>(
              packed.data_ptr<uint8_t>(), minimum.data_ptr<c10::BFloat16>(), scale.data_ptr<c10::BFloat16>(), numel,
              group_size, groups, out.data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
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
    kernel<<<blocks_for(bytes), kThreads, 0, stream()>>>(x.data_ptr<scalar_t>(), numel, out.data_ptr<scalar_t>(),
                                                          packed.data_ptr<uint8_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
    dropout_pack_kernel<scalar_t><<<(numel + kBlockValues - 1) / kBlockValues, kThreads, 0, stream()>>>(
        x.data_ptr<scalar_t>(), numel, static_cast<float>(p), static_cast<float>(1.0 / (1.0 - p)),
        static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), out.data_ptr<scalar_t>(),
        packed.data_ptr<uint8_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
    kernel<<<blocks_for(eights ? numel / 8 : numel), kThreads, 0, stream()>>>(
        grad_out.data_ptr<scalar_t>(), packed.data_ptr<uint8_t>(), numel, static_cast<float>(gain),
        grad_in.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  MEMBENCH_DISPATCH_MAP_TYPES(x.scalar_type(), "maxpool2d_forward_cuda", [&] {
    maxpool_forward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream()>>>(
        x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(), planes, height, width, out_h,
        out_w, static_cast<int>(kernel), static_cast<int>(stride), static_cast<int>(padding));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
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
  MEMBENCH_DISPATCH_MAP_TYPES(grad_out.scalar_type(), "maxpool2d_backward_cuda", [&] {
    maxpool_backward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream()>>>(
        grad_out.data_ptr<scalar_t>(), index.data_ptr<int8_t>(), grad_in.data_ptr<scalar_t>(), planes, height, width,
        out_h, out_w, static_cast<int>(kernel), static_cast<int>(stride), static_cast<int>(padding));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return grad_in;
}
