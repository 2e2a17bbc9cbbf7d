// CPU kernels of the application-classification belief propagation (OpenMP), and their bindings.
//
// They compute what membench/appclass/reference.py computes, keeping the order of the operations
// whose order changes a double where it can: feature distances summed feature by feature, column
// sums of node and edge-distance arrays taken row by row, beliefs updated pattern edge by pattern
// edge, maxima with NumPy's fmax (NaN ignored, the earlier value kept on ties). Three changes of
// method, exact up to the last bits of an exp, a log or a sum:
//   * edge messages are never stored: the normalisation y -> log(exp(y - m)) - L is non-decreasing,
//     so the per-node maximum of normalised messages is the normalisation of the raw maximum;
//   * maxima are taken over nodes where the messages allow it: fl(v - c) is non-increasing in c,
//     so the maximum over a node's edges of v[node] - ce[edge] is v[node] minus the smallest ce of
//     its edges. That gives each column's maximum m and the per-node maxima of the messages grouped
//     by the node they read (the reverse ones); only the forward messages, which read the source
//     and group by destination, need a pass over the edges (scatter_max_);
//   * the exp-sums are grouped by the node each message reads: the sum over edges of
//     exp(v[u] - ce[e] - m) is the sum over nodes u of exp((v[u] - ce_min[u]) - m) times the sum
//     over u's edges of exp(ce_min[u] - ce[e]), which depends on ce alone and is computed once
//     (group_exp_sums). An iteration then takes 2 x nodes x pattern edges exponentials, not
//     2 x edges x pattern edges. The reference adds the terms in edge order, these sums node by node:
//     the sums differ in their last bits (7e-14 relative in RMAT-18's beliefs), far below the 7
//     printed digits, which the tests and `membench appclass compare` check byte for byte.
// The exp inside the sums is a polynomial the compiler vectorises (within about 1 ulp of libm's);
// log(exp(y)) is y (within 1 ulp) except where exp(y) is subnormal or zero, where libm computes it
// exactly as the reference does (that is where PNNL's -inf and NaN come from).
//
// Threads split columns or nodes, never the terms of one sum: every sum adds its terms in the same
// order for any number of threads, no two threads write the same row, and the result does not
// depend on the thread count.
//
// Every buffer of the belief propagation, scratch included, is a torch tensor allocated by the
// calling thread before a parallel region (each part of the work gets its slice): the CPU
// allocator trace of the meter (the PyTorch profiler's memory events, which only see the thread
// that runs the profiler) then counts every byte these kernels hold. (format_e, which prints the
// result, keeps its text in std::string; distance_block its 64 running sums and normalise_rows its
// 64 column minima on the stack.)

// torch's Python headers (the bindings' tensor casters) and the ATen operators used, not
// <torch/extension.h>, whose C++ frontend would triple the build's time.
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int64_t kBlockRows = 64;  // rows per exp block: the block stays in L1
constexpr int64_t kPrefetchEdges = 16;  // how far ahead scatter_max_ fetches an edge's rows
constexpr int64_t kChunkValues = 32768;  // values per chunk of normprob_'s exp-sums (a barrier each)
constexpr int64_t kSumColumns = 16;  // columns a thread sums at a time: four AVX2 registers

// exp(y) for y in [-708, 709] (normal results).
inline double exp_normal(double y) {
  const double log2e = 1.4426950408889634;
  const double shifter = 0x1.8p52;  // adding it rounds to an integer held in the low mantissa bits
  const double ln2_hi = 0x1.62e42fee00000p-1;  // ln 2 split so that k * ln2_hi is exact
  const double ln2_lo = 0x1.a39ef35793c76p-33;
  double kd = y * log2e + shifter;
  uint64_t k_bits;
  std::memcpy(&k_bits, &kd, sizeof k_bits);
  kd -= shifter;
  const double r = (y - kd * ln2_hi) - kd * ln2_lo;  // |r| <= ln2 / 2
  // Taylor series to r^13 / 13!: truncation below 1e-17 relative on |r| <= ln2 / 2. The terms
  // from r^2 on are summed by Estrin's scheme (short dependency chains, so the vector units stay
  // busy), the last two steps by Horner's, which keeps the result within 1 ulp of libm's.
  const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  const double q1 = 0.5 + r * (1.0 / 6.0), q2 = 1.0 / 24.0 + r * (1.0 / 120.0);
  const double q3 = 1.0 / 720.0 + r * (1.0 / 5040.0), q4 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
  const double q5 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0), q6 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0);
  const double tail = ((q1 + r2 * q2) + r4 * (q3 + r2 * q4)) + r8 * (q5 + r2 * q6);
  const double p = (tail * r + 1.0) * r + 1.0;
  // The low 12 bits of k_bits + 1023 are k + 1023, the biased exponent of 2^k.
  const uint64_t scale_bits = (k_bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

// out[i] = exp(y[i]) as a term of an exp-sum, vectorised (the AVX2 clone where the CPU has it;
// without contraction into FMAs both clones round alike). Every caller's sum also holds a term
// exp(0) = 1 (y is a value minus its column's maximum, or a node's smallest edge distance minus an
// edge's), so a term below exp(-708) < 1e-307 lies some 900 binary places below the sum's last bit:
// it is taken as 0, sparing libm's slow subnormal path. NaN stays NaN and y > 709 gives inf.
__attribute__((target_clones("avx2", "default"))) void exp_block(const double* y, double* out, int64_t n) {
  // The range test is folded into the vectorised loop; the scalar fix-up runs only when needed.
  int64_t outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = exp_normal(y[i]);
    outside |= !((y[i] >= -708.0) & (y[i] <= 709.0));
  }
  if (outside == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    const double v = y[i];
    if (!(v >= -708.0 && v <= 709.0)) out[i] = v != v ? v : (v > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
  }
}

// Below this exp(y) is subnormal (or 0) and log(exp(y)) is no longer y to the last bit.
template <typename T>
constexpr T normal_floor() {
  return sizeof(T) == 8 ? T(-708) : T(-87);
}

// log(exp(y)) as the reference computes it (see the header comment).
template <typename T>
inline T log_exp(T y) {
  if (y >= normal_floor<T>()) return y + T(0);  // + 0 turns -0 into +0, as log(exp(-0)) = log(1) = +0
  // log(exp(-inf)) = log(0) = -inf (a node without edges); libm gets there through a slow
  // divide-by-zero path.
  if (y == -std::numeric_limits<T>::infinity()) return y;
  return std::log(std::exp(y));
}

// Whether log_exp(y) needs libm: y below the normal floor but not -inf, or NaN. An integer, so that
// a loop OR-ing it vectorises.
template <typename T>
inline int64_t log_exp_needs_libm(T y) {
  return static_cast<int64_t>(!(y >= normal_floor<T>())) & static_cast<int64_t>(y != -std::numeric_limits<T>::infinity());
}

// NumPy's fmax(running, value) for a running maximum that is never NaN (it starts at a number and
// only takes values through this function): value if it is greater, so NaN is ignored and ties
// keep the earlier value. One max instruction; fmax of a NaN running value needs four.
template <typename T>
inline T raise_max(T running, T value) {
  return value > running ? value : running;
}

// Calls body with a double or a float (pointer type tag) per the dtype. OpenMP pragmas cannot
// sit inside a macro argument such as AT_DISPATCH_FLOATING_TYPES's, hence this function.
template <typename Body>
void dispatch_float(at::ScalarType dtype, Body body) {
  if (dtype == at::kDouble) {
    body(double{});
  } else {
    TORCH_CHECK(dtype == at::kFloat, "tensors must be float64 or float32");
    body(float{});
  }
}

int threads_of(int64_t requested) { return static_cast<int>(std::max<int64_t>(1, requested)); }

// [begin, end) of part t of n items split into parts pieces.
inline std::pair<int64_t, int64_t> share(int64_t n, int t, int parts) {
  return {n * t / parts, n * (t + 1) / parts};
}

// The widest of the parts pieces of n items.
inline int64_t widest_share(int64_t n, int parts) { return (n + parts - 1) / parts; }

// Per part of a blocked exp pass over columns: two (kBlockRows x width) double blocks (y, exp(y)),
// each followed by the kSumColumns values add_chunk_sums may read past it (zeros).
at::Tensor exp_scratch(int parts, int64_t width) {
  const int64_t block = kBlockRows * std::max<int64_t>(width, 1) + kSumColumns;
  return at::zeros({parts, 2, block}, at::dtype(at::kDouble));
}

void check_matrix(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), name, " must be a contiguous matrix");
  TORCH_CHECK(x.scalar_type() == at::kDouble || x.scalar_type() == at::kFloat, name, " must be float64 or float32");
}

void check_index(const at::Tensor& x, int64_t length, const char* name) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 1 && x.is_contiguous() && x.scalar_type() == at::kLong && x.size(0) == length,
              name, " must be a contiguous int64 vector of length ", length);
}

// Checks the column vectors of a normalisation of x (rows, cols): maxima and floors of x's dtype,
// none of the floors NaN (normalise_rows raises the values to them with raise_max), and float64
// exp-sums.
void check_normalisation(const at::Tensor& x, const at::Tensor& m, const at::Tensor& sums,
                         const at::Tensor& floor) {
  const int64_t cols = x.size(1);
  for (const auto* v : {&m, &floor})
    TORCH_CHECK(v->device().is_cpu() && v->dim() == 1 && v->size(0) == cols && v->is_contiguous() &&
                    v->scalar_type() == x.scalar_type(),
                "column maxima and floors must be contiguous (pattern edges,) of the messages' dtype");
  TORCH_CHECK(sums.device().is_cpu() && sums.dim() == 1 && sums.size(0) == cols && sums.is_contiguous() &&
                  sums.scalar_type() == at::kDouble,
              "exp-sums must be contiguous float64 (pattern edges,)");
  bool floor_has_nan = false;
  dispatch_float(floor.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* f = floor.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) floor_has_nan = floor_has_nan || f[j] != f[j];
  });
  TORCH_CHECK(!floor_has_nan, "floors must not be NaN");
}

// The storage rows of the edges, edge i in row positions[i] (null: row i), after checking that
// positions is a permutation of [0, rows). Edges are stored part by part (scatter_max_) while
// every sum and every maximum with ties takes them in edge order, through these rows.
const int64_t* edge_rows(const c10::optional<at::Tensor>& positions, int64_t rows) {
  if (!positions) return nullptr;
  check_index(*positions, rows, "positions");
  const int64_t* p = positions->data_ptr<int64_t>();
  auto seen = at::zeros({rows}, at::dtype(at::kBool));
  bool* seen_p = seen.data_ptr<bool>();
  for (int64_t i = 0; i < rows; ++i) {
    TORCH_CHECK(p[i] >= 0 && p[i] < rows && !seen_p[p[i]], "positions must be a permutation of the ", rows, " edge rows");
    seen_p[p[i]] = true;
  }
  return p;
}

// The row of edge i.
inline int64_t edge_row(const int64_t* rows, int64_t i) { return rows ? rows[i] : i; }

// out[row(k), j] = sqrt(sum over f in order of (b[j, f] - at[f, k])^2) for the n rows k of one
// block, row(k) = out_rows[k] (null: k); column k of at holds row k's features (stride: the
// distance between features). Vectorised over the block's rows, each sum adding its features in
// feature order (AVX2 where the CPU has it; without FMA contraction every width rounds alike).
// total: kBlockRows values on the stack.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void distance_block(const T* at, int64_t stride, int64_t n, const T* b,
                                                                      int64_t features, int64_t cols, T* out,
                                                                      const int64_t* out_rows) {
  T total[kBlockRows];
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t k = 0; k < n; ++k) total[k] = 0;
    for (int64_t f = 0; f < features; ++f) {
      const T b_jf = b[j * features + f];
      const T* a_f = at + f * stride;
#pragma omp simd
      for (int64_t k = 0; k < n; ++k) {
        const T diff = b_jf - a_f[k];
        total[k] += diff * diff;
      }
    }
    for (int64_t k = 0; k < n; ++k) out[edge_row(out_rows, k) * cols + j] = std::sqrt(total[k]);
  }
}

// Euclidean distances (R, P) between the R rows whose features are the columns of at (F, R), and
// the rows of b (P, F): squares summed feature by feature, row k into row positions[k] (edge_rows).
// The data's features come by column, as the reader parses them, so they are never transposed.
at::Tensor distances(at::Tensor at, at::Tensor b, int64_t threads, c10::optional<at::Tensor> positions) {
  check_matrix(at, "at");
  check_matrix(b, "b");
  TORCH_CHECK(at.size(0) == b.size(1) && at.scalar_type() == b.scalar_type(), "at and b need the same features and dtype");
  const int64_t rows = at.size(1), cols = b.size(0), features = at.size(0);
  const int64_t* out_rows = edge_rows(positions, rows);
  auto out = at::empty({rows, cols}, at.options());
  dispatch_float(at.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* ap = at.data_ptr<scalar_t>();
    const scalar_t* bp = b.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
#pragma omp parallel for num_threads(threads_of(threads)) schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t first = block * kBlockRows;
      distance_block(ap + first, rows, std::min(kBlockRows, rows - first), bp, features, cols,
                     out_rows ? op : op + first * cols, out_rows ? out_rows + first : out_rows);
    }
  });
  return out;
}

// out[k] = the raise_max of the parts' partial maxima partial[t * width + k], taken in part order
// (so that ties and NaN resolve as one pass over the rows in order would), from the lowest value.
template <typename T>
void combine_partial_maxima(const T* partial, int parts, int64_t width, T* out) {
  for (int64_t k = 0; k < width; ++k) {
    T m = std::numeric_limits<T>::lowest();
    for (int t = 0; t < parts; ++t) m = raise_max(m, partial[t * width + k]);
    out[k] = m;
  }
}

// mine[j] = raise_max(mine[j], x[row(i), j]) for i in [begin, end) in order, row(i) = rows[i] (null:
// i), vectorised over j, so each column still takes its rows in order.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void column_max_rows(const T* __restrict__ x, const int64_t* rows,
                                                                       int64_t begin, int64_t end, int64_t cols,
                                                                       T* __restrict__ mine) {
  for (int64_t i = begin; i < end; ++i) {
    const T* row = x + edge_row(rows, i) * cols;
    for (int64_t j = 0; j < cols; ++j) mine[j] = raise_max(mine[j], row[j]);
  }
}

// column_max of a checked matrix whose row i is x_rows[i] (null: i).
at::Tensor column_max_of(const at::Tensor& x, int64_t threads, const int64_t* x_rows) {
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = at::empty({cols}, x.options());
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const int parts = threads_of(threads);
    at::Tensor partial = at::full({parts, cols}, std::numeric_limits<scalar_t>::lowest(), x.options());
    scalar_t* pp = partial.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [begin, end] = share(rows, t, parts);
      column_max_rows(xp, x_rows, begin, end, cols, pp + t * cols);
    }
    combine_partial_maxima(static_cast<const scalar_t*>(pp), parts, cols, out.data_ptr<scalar_t>());
  });
  return out;
}

// Per-column maximum ignoring NaN, never below the lowest finite value (PNNL's atomic_fmax loop),
// over the rows in edge order where positions (edge_rows) say where each edge is stored.
at::Tensor column_max(at::Tensor x, int64_t threads, c10::optional<at::Tensor> positions) {
  check_matrix(x, "x");
  return column_max_of(x, threads, edge_rows(positions, x.size(0)));
}

// The rows [begin, end) of prepare_messages: vr, the differences vr - ce_min_forward (into fmax) and
// vf - ce_min_src (into rmax), and the running column maxima of vf, vr and the two differences
// (maxima: 4 x cols, in that order).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void prepare_rows(
    const T* __restrict__ mu, T* __restrict__ fmax, T* __restrict__ rmax, const T* __restrict__ ce_min_forward,
    const T* __restrict__ ce_min_src, const int64_t* __restrict__ pattern_src, const int64_t* __restrict__ pattern_dst,
    int64_t begin, int64_t end, int64_t nodes, int64_t cols, T* __restrict__ vr, T* __restrict__ maxima) {
  T* vf_max = maxima;
  T* vr_max = vf_max + cols;
  T* forward_max = vr_max + cols;
  T* reverse_max = forward_max + cols;
  for (int64_t i = begin; i < end; ++i) {
    const T* mu_row = mu + i * nodes;
    const int64_t row = i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const T f = mu_row[pattern_dst[j]] - fmax[row + j];
      const T r = mu_row[pattern_src[j]] - rmax[row + j];
      const T forward = r - ce_min_forward[row + j];
      const T reverse = f - ce_min_src[row + j];
      vr[row + j] = r;
      fmax[row + j] = forward;
      rmax[row + j] = reverse;
      vf_max[j] = raise_max(vf_max[j], f);
      vr_max[j] = raise_max(vr_max[j], r);
      forward_max[j] = raise_max(forward_max[j], forward);
      reverse_max[j] = raise_max(reverse_max[j], reverse);
    }
  }
}

// The node side of an iteration in one pass over the rows. With vf = mu[:, pattern_dst] - fmax and
// vr = mu[:, pattern_src] - rmax (fmax and rmax as the previous iteration left them), it writes vr,
// and overwrites fmax with vr - ce_min_forward and rmax with vf - ce_min_src: the messages minus
// their nodes' smallest edge distance, which node_exp_sums reads, and for the messages grouped by
// the node they read, their raw maxima. It returns the column maxima, as column_max takes them
// (same row shares, NaN ignored, floored at the lowest finite value), of vf, vr and the two
// differences: the four rows of a (4, pattern edges) tensor.
at::Tensor prepare_messages(at::Tensor mu, at::Tensor fmax, at::Tensor rmax, at::Tensor pattern_src_tensor,
                               at::Tensor pattern_dst_tensor, at::Tensor ce_min_forward, at::Tensor ce_min_src,
                               at::Tensor vr, int64_t threads) {
  check_matrix(mu, "mu");
  for (const auto* x : {&fmax, &rmax, &ce_min_forward, &ce_min_src, &vr}) {
    check_matrix(*x, "node array");
    TORCH_CHECK(x->sizes() == fmax.sizes() && x->scalar_type() == mu.scalar_type(),
                "node arrays must be (nodes, pattern edges) of mu's dtype");
  }
  const int64_t rows = mu.size(0), nodes = mu.size(1), cols = fmax.size(1);
  TORCH_CHECK(fmax.size(0) == rows, "node arrays must have mu's rows");
  check_index(pattern_src_tensor, cols, "pattern_src");
  check_index(pattern_dst_tensor, cols, "pattern_dst");
  const int64_t* pattern_src = pattern_src_tensor.data_ptr<int64_t>();
  const int64_t* pattern_dst = pattern_dst_tensor.data_ptr<int64_t>();
  auto out = at::empty({4, cols}, mu.options());
  dispatch_float(mu.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t lowest = std::numeric_limits<scalar_t>::lowest();
    const int parts = threads_of(threads);
    at::Tensor partial = at::full({parts, 4, cols}, lowest, mu.options());
    scalar_t* pp = partial.data_ptr<scalar_t>();
    const scalar_t* mup = mu.data_ptr<scalar_t>();
    scalar_t* fp = fmax.data_ptr<scalar_t>();
    scalar_t* rp = rmax.data_ptr<scalar_t>();
    const scalar_t* cfp = ce_min_forward.data_ptr<scalar_t>();
    const scalar_t* csp = ce_min_src.data_ptr<scalar_t>();
    scalar_t* vrp = vr.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [begin, end] = share(rows, t, parts);
      prepare_rows(mup, fp, rp, cfp, csp, pattern_src, pattern_dst, begin, end, nodes, cols, vrp, pp + t * 4 * cols);
    }
    combine_partial_maxima(static_cast<const scalar_t*>(pp), parts, 4 * cols, out.data_ptr<scalar_t>());
  });
  return out;
}

// Whether some value x[i, j] - m[j] of the rows [begin, end) may take log_exp's libm branch: a test
// by column on its smallest value other than -inf (fl(x - m) is non-decreasing in x), NaN and a
// non-finite m counting as may. One test for a block of rows, where a test by row costs a
// reduction across the row; low: kCheckColumns values on the stack.
template <typename T>
inline bool rows_may_need_libm(const T* x, int64_t begin, int64_t end, int64_t cols, const T* m) {
  constexpr int64_t kCheckColumns = 64;
  constexpr T inf = std::numeric_limits<T>::infinity();
  for (int64_t c0 = 0; c0 < cols; c0 += kCheckColumns) {
    const int64_t width = std::min(kCheckColumns, cols - c0);
    T low[kCheckColumns];
    for (int64_t k = 0; k < width; ++k) low[k] = inf;
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * cols + c0;
      for (int64_t k = 0; k < width; ++k) {
        const T v = row[k] == -inf ? inf : row[k];
        low[k] = (v < low[k] || v != v) ? v : low[k];  // NaN stays
      }
    }
    for (int64_t k = 0; k < width; ++k)
      if (!(m[c0 + k] < inf) || log_exp_needs_libm(static_cast<T>(low[k] - m[c0 + k]))) return true;
  }
  return false;
}

// x[i, j] = (stable ? y : log_exp(y)) - log_sum[j] with y = x[i, j] - m[j], floored at floor[j]
// (raise_max: floors are never NaN, see check_normalisation) unless floor is null, for the rows
// [begin, end). A row whose values all take log_exp's first two branches goes through a loop the
// compiler vectorises; the others through log_exp itself, value by value. Rows are tested by
// blocks first (rows_may_need_libm), and one by one only in a block where some value may need libm.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void normalise_rows(T* x, int64_t begin, int64_t end, int64_t cols,
                                                                      const T* m, const T* log_sum, const T* floor,
                                                                      bool stable) {
  for (int64_t r0 = begin; r0 < end; r0 += kBlockRows) {
    const int64_t r1 = std::min(end, r0 + kBlockRows);
    const bool careful = !stable && rows_may_need_libm(x, r0, r1, cols, m);
    for (int64_t i = r0; i < r1; ++i) {
      T* row = x + i * cols;
      int64_t needs_libm = 0;
      if (careful) {
#pragma omp simd reduction(| : needs_libm)
        for (int64_t j = 0; j < cols; ++j) needs_libm |= log_exp_needs_libm(static_cast<T>(row[j] - m[j]));
      }
      if (needs_libm) {
        for (int64_t j = 0; j < cols; ++j) {
          const T value = log_exp(static_cast<T>(row[j] - m[j])) - log_sum[j];
          row[j] = floor ? raise_max(floor[j], value) : value;
        }
      } else if (floor) {
        for (int64_t j = 0; j < cols; ++j) {
          const T y = row[j] - m[j];
          row[j] = raise_max(floor[j], static_cast<T>((stable ? y : y + T(0)) - log_sum[j]));
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) {
          const T y = row[j] - m[j];
          row[j] = (stable ? y : y + T(0)) - log_sum[j];
        }
      }
    }
  }
}

// e = exp(y) for the rows [begin, end) of a chunk of x, y[(i - begin) * cols + j] = x[row(i), j] -
// m[j], row(i) = x_rows[i] (null: i): whole rows, so that the exponentials run over contiguous values.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void chunk_exponentials(const T* x, const int64_t* x_rows,
                                                                          int64_t begin, int64_t end, int64_t cols,
                                                                          const T* m, double* __restrict__ y,
                                                                          double* __restrict__ e) {
  for (int64_t i = begin; i < end; ++i) {
    const T* row = x + edge_row(x_rows, i) * cols;
    double* yi = y + (i - begin) * cols;
    for (int64_t j = 0; j < cols; ++j) yi[j] = static_cast<T>(row[j] - m[j]);
  }
  exp_block(y, e, (end - begin) * cols);
}

// sums[j - begin] += e[i, j] for the rows i = 0 .. rows - 1 of a chunk in order, columns [begin,
// end), kSumColumns columns at a time in registers (a sum kept in memory waits on its own store
// every row). e must be readable kSumColumns values past its last row: the columns past end add
// into registers that are never stored.
__attribute__((target_clones("avx2", "default"))) void add_chunk_sums(const double* e, int64_t rows, int64_t cols,
                                                                      int64_t begin, int64_t end,
                                                                      double* __restrict__ sums) {
  for (int64_t first = begin; first < end; first += kSumColumns) {
    const int64_t width = std::min(kSumColumns, end - first);
    double total[kSumColumns];
    for (int64_t k = 0; k < kSumColumns; ++k) total[k] = k < width ? sums[first - begin + k] : 0.0;
    for (int64_t i = 0; i < rows; ++i) {
      const double* ei = e + i * cols + first;
      for (int64_t k = 0; k < kSumColumns; ++k) total[k] += ei[k];
    }
    for (int64_t k = 0; k < width; ++k) sums[first - begin + k] = total[k];
  }
}

// Column-wise log-softmax in place: x = log(exp(x - m)) - log(sum exp(x - m)) (stable: x - m - log(..)),
// m the column maxima: column_max(x), or given where an earlier pass took them (update_beliefs_).
// The maxima and sums take the rows in edge order where positions (edge_rows) say where each edge
// is stored.
void normprob_(at::Tensor x, bool stable, int64_t threads, c10::optional<at::Tensor> column_maxima,
               c10::optional<at::Tensor> positions) {
  check_matrix(x, "x");
  const int64_t* x_rows = edge_rows(positions, x.size(0));
  if (column_maxima)
    TORCH_CHECK(column_maxima->dim() == 1 && column_maxima->size(0) == x.size(1) && column_maxima->is_contiguous() &&
                    column_maxima->scalar_type() == x.scalar_type(),
                "column_max must be contiguous (columns,) of x's dtype");
  const auto m = column_maxima ? *column_maxima : column_max_of(x, threads, x_rows);
  const int64_t rows = x.size(0), cols = x.size(1);
  const int parts = threads_of(threads);
  auto sums = at::zeros({cols}, at::dtype(at::kDouble));
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    double* sp = sums.data_ptr<double>();
    {
      // The sums chunk by chunk of rows: the threads take a chunk's exponentials by rows, then its
      // sums by columns, each column adding the chunk's rows in order. Splitting the exponentials
      // by columns instead would leave each thread a few values per row, too few to vectorise.
      // The exponentials alternate between two buffers, so that one barrier a chunk suffices: a
      // thread may take the next chunk's while another still sums this one's.
      const int64_t chunk_rows = std::max<int64_t>(1, std::min(rows, kChunkValues / std::max<int64_t>(cols, 1)));
      const int64_t chunk_values = chunk_rows * cols;
      // y, then twice exp(y) and the kSumColumns values add_chunk_sums may read past it.
      auto chunk = at::zeros({3 * chunk_values + 2 * kSumColumns}, at::dtype(at::kDouble));
      double* y = chunk.data_ptr<double>();
      double* const exponentials[2] = {y + chunk_values, y + 2 * chunk_values + kSumColumns};
#pragma omp parallel num_threads(parts)
      {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        const auto [column_begin, column_end] = share(cols, t, team);
        for (int64_t first = 0, c = 0; first < rows; first += chunk_rows, ++c) {
          const int64_t n = std::min(chunk_rows, rows - first);
          const auto [begin, end] = share(n, t, team);
          double* e = exponentials[c % 2];
          chunk_exponentials(static_cast<const scalar_t*>(xp), x_rows, first + begin, first + end, cols, mp,
                             y + begin * cols, e + begin * cols);
#pragma omp barrier
          add_chunk_sums(e, n, cols, column_begin, column_end, sp + column_begin);
        }
      }
    }
    auto log_sum_tensor = at::empty({cols}, x.options());
    scalar_t* log_sum = log_sum_tensor.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) log_sum[j] = std::log(static_cast<scalar_t>(sp[j]));
#pragma omp parallel num_threads(parts)
    {
      const auto [begin, end] = share(rows, omp_get_thread_num(), omp_get_num_threads());
      normalise_rows(xp, begin, end, cols, mp, log_sum, static_cast<const scalar_t*>(nullptr), stable);
    }
  });
}

// The range [bounds[t], bounds[t + 1]) of part t (nodes or edges), from a (parts + 1) int64 tensor
// of boundaries.
std::pair<int64_t, int64_t> part_range(const at::Tensor& bounds, int t) {
  const int64_t* b = bounds.data_ptr<int64_t>();
  return {b[t], b[t + 1]};
}

// The number of parts of bounds, after checking that they split [0, items).
int parts_of(const at::Tensor& bounds, int64_t items) {
  TORCH_CHECK(bounds.device().is_cpu() && bounds.dim() == 1 && bounds.is_contiguous() && bounds.scalar_type() == at::kLong &&
                  bounds.size(0) >= 2,
              "bounds must be a contiguous int64 vector of at least 2 boundaries");
  const int64_t* b = bounds.data_ptr<int64_t>();
  TORCH_CHECK(b[0] == 0 && b[bounds.size(0) - 1] == items, "bounds must run from 0 to the number of nodes or edges");
  for (int64_t t = 1; t < bounds.size(0); ++t) TORCH_CHECK(b[t - 1] <= b[t], "bounds must not decrease");
  return static_cast<int>(bounds.size(0) - 1);
}

// (num_nodes, cols): per node, the minimum of the rows of the edges whose group (groups: in edge
// order) is that node (+inf for none); positions (edge_rows) say where each edge is stored. One
// thread per part: part t takes the edges of the nodes [bounds[t], bounds[t + 1]), in edge order.
at::Tensor group_min(at::Tensor x, at::Tensor groups, int64_t num_nodes, at::Tensor bounds,
                        c10::optional<at::Tensor> positions) {
  check_matrix(x, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  check_index(groups, rows, "groups");
  const int64_t* x_rows = edge_rows(positions, rows);
  const int parts = parts_of(bounds, num_nodes);
  auto out = at::full({num_nodes, cols}, std::numeric_limits<double>::infinity(), x.options());
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const int64_t* gp = groups.data_ptr<int64_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [first, last] = part_range(bounds, t);
      for (int64_t i = 0; i < rows; ++i) {
        if (gp[i] < first || gp[i] >= last) continue;
        scalar_t* o = op + gp[i] * cols;
        const scalar_t* row = xp + edge_row(x_rows, i) * cols;
        for (int64_t j = 0; j < cols; ++j) o[j] = std::min(o[j], row[j]);
      }
    }
  });
  return out;
}

// Part [first, last) of group_exp_sums: the edges of the nodes it owns, in edge order, edge i in
// row ce_rows[i] (null: i). y and e are kBlockRows * cols doubles of scratch, block_groups
// kBlockRows node indices.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void add_group_exp_sums(const T* ce, const int64_t* ce_rows,
                                                                          const int64_t* groups, const T* ce_min,
                                                                          int64_t edges, int64_t cols, int64_t first,
                                                                          int64_t last, double* __restrict__ sums,
                                                                          double* __restrict__ y, double* __restrict__ e,
                                                                          int64_t* __restrict__ block_groups) {
  int64_t n = 0;
  auto flush = [&] {
    exp_block(y, e, n * cols);
    for (int64_t b = 0; b < n; ++b) {
      double* s = sums + block_groups[b] * cols;
      for (int64_t j = 0; j < cols; ++j) s[j] += e[b * cols + j];
    }
    n = 0;
  };
  for (int64_t i = 0; i < edges; ++i) {
    const int64_t g = groups[i];
    if (g < first || g >= last) continue;
    const T* c = ce + edge_row(ce_rows, i) * cols;
    const T* low = ce_min + g * cols;
    for (int64_t j = 0; j < cols; ++j) y[n * cols + j] = static_cast<T>(low[j] - c[j]);
    block_groups[n] = g;
    if (++n == kBlockRows) flush();
  }
  if (n > 0) flush();
}

// (num_nodes, cols) float64: per node, the sum over its edges (by groups), in edge order, of
// exp(ce_min[node] - ce[edge]), where ce_min is the group_min of ce by the same groups. Every term
// lies in (0, 1] and the node's smallest edge gives 1, so nothing overflows. groups and positions
// as in group_min. One thread per part: part t takes the edges of the nodes [bounds[t], bounds[t + 1]).
at::Tensor group_exp_sums(at::Tensor ce, at::Tensor groups, at::Tensor ce_min, at::Tensor bounds,
                             c10::optional<at::Tensor> positions) {
  check_matrix(ce, "ce");
  check_matrix(ce_min, "ce_min");
  const int64_t edges = ce.size(0), cols = ce.size(1), num_nodes = ce_min.size(0);
  check_index(groups, edges, "groups");
  const int64_t* ce_rows = edge_rows(positions, edges);
  TORCH_CHECK(ce_min.size(1) == cols && ce_min.scalar_type() == ce.scalar_type(), "ce_min must be (nodes, cols) of ce's dtype");
  const int parts = parts_of(bounds, num_nodes);
  auto sums = at::zeros({num_nodes, cols}, ce.options().dtype(at::kDouble));
  auto scratch = exp_scratch(parts, cols);
  auto block_groups = at::empty({parts, kBlockRows}, at::dtype(at::kLong));
  dispatch_float(ce.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const int64_t block = scratch.size(2);
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [first, last] = part_range(bounds, t);
      double* y = scratch.data_ptr<double>() + t * 2 * block;
      add_group_exp_sums(ce.data_ptr<scalar_t>(), ce_rows, groups.data_ptr<int64_t>(), ce_min.data_ptr<scalar_t>(), edges,
                         cols, first, last, sums.data_ptr<double>(), y, y + block,
                         block_groups.data_ptr<int64_t>() + t * kBlockRows);
    }
  });
  return sums;
}

// One part of scatter_max_: raw[group(e)] = fmax(raw[group(e)], node[row(e)] - ce[e]) for the
// edges e in [begin, end), in order, whose groups must lie in [first, last). Returns false, having
// skipped them, if some rows or groups do not.
template <typename T>
__attribute__((target_clones("avx2", "default"))) bool scatter_max_part(const T* ce, const int64_t* rows_of,
                                                                        const int64_t* groups, const T* node,
                                                                        int64_t num_rows, int64_t begin, int64_t end,
                                                                        int64_t first, int64_t last, int64_t cols,
                                                                        T* raw) {
  bool in_range = true;
  for (int64_t e = begin; e < end; ++e) {
    // The distances stream in order, the sources' rows nearly so; the groups come in random order
    // within the part, whose rows of raw mostly stay in cache. Fetching a later edge's three rows
    // ahead still measured 10 to 15 % faster than fetching none or only the random ones.
    if (e + kPrefetchEdges < end) {
      const int64_t ahead = e + kPrefetchEdges;
      const char* c_ahead = reinterpret_cast<const char*>(ce + ahead * cols);
      const char* v_ahead = reinterpret_cast<const char*>(node + std::clamp<int64_t>(rows_of[ahead], 0, num_rows - 1) * cols);
      const char* r_ahead = reinterpret_cast<const char*>(raw + std::clamp<int64_t>(groups[ahead], first, last - 1) * cols);
      for (int64_t offset = 0; offset < cols * static_cast<int64_t>(sizeof(T)); offset += 64) {
        __builtin_prefetch(c_ahead + offset, 0);
        __builtin_prefetch(v_ahead + offset, 0);
        __builtin_prefetch(r_ahead + offset, 1);
      }
    }
    const int64_t g = groups[e], u = rows_of[e];
    if (g < first || g >= last || u < 0 || u >= num_rows) {
      in_range = false;
      continue;
    }
    const T* c = ce + e * cols;
    const T* v = node + u * cols;
    T* r = raw + g * cols;
    for (int64_t j = 0; j < cols; ++j) r[j] = raise_max(r[j], static_cast<T>(v[j] - c[j]));
  }
  return in_range;
}

// raw (overwritten) = per node, the maximum over its edges e (by groups) of node[rows(e)] - ce[e],
// NaN ignored, -inf for a node without edges: the raw maxima of the messages where they cannot be
// taken from the nodes (forward messages read the source's row and are grouped by destination).
// The edges are stored part by part (edge_parts in native.py): part t owns the nodes [bounds[t],
// bounds[t + 1]) and holds the edges into them, the rows [edge_bounds[t], edge_bounds[t + 1]) of
// ce, rows and groups, in edge order. Threads take the parts as they come free: no two write a
// row, each node's edges are taken in edge order, and the distances stream while a part's rows of
// raw stay in cache.
void scatter_max_(at::Tensor raw, at::Tensor ce, at::Tensor rows, at::Tensor groups, at::Tensor node,
                  at::Tensor bounds, at::Tensor edge_bounds, int64_t threads) {
  check_matrix(raw, "raw");
  check_matrix(ce, "ce");
  check_matrix(node, "node");
  const int64_t edges = ce.size(0), cols = ce.size(1), num_nodes = raw.size(0);
  check_index(rows, edges, "rows");
  check_index(groups, edges, "groups");
  TORCH_CHECK(raw.size(1) == cols && node.size(1) == cols && raw.scalar_type() == ce.scalar_type() &&
                  node.scalar_type() == ce.scalar_type(),
              "raw and node must be (nodes, cols) of ce's dtype");
  const int parts = parts_of(bounds, num_nodes);
  TORCH_CHECK(parts_of(edge_bounds, edges) == parts, "edge_bounds must hold one edge range per part of bounds");
  for (int t = 0; t < parts; ++t) {
    const auto [first, last] = part_range(bounds, t);
    const auto [begin, end] = part_range(edge_bounds, t);
    TORCH_CHECK(begin == end || (first < last && node.size(0) > 0), "a part with edges must own nodes, and node must have rows");
  }
  bool all_in_range = true;
  dispatch_float(ce.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    scalar_t* rp = raw.data_ptr<scalar_t>();
    bool in_range = true;
#pragma omp parallel for num_threads(threads_of(threads)) schedule(dynamic, 1) reduction(&& : in_range)
    for (int t = 0; t < parts; ++t) {
      const auto [first, last] = part_range(bounds, t);
      const auto [begin, end] = part_range(edge_bounds, t);
      std::fill(rp + first * cols, rp + last * cols, -std::numeric_limits<scalar_t>::infinity());
      in_range = scatter_max_part(ce.data_ptr<scalar_t>(), rows.data_ptr<int64_t>(), groups.data_ptr<int64_t>(),
                                  node.data_ptr<scalar_t>(), node.size(0), begin, end, first, last, cols, rp) &&
                 in_range;
    }
    all_in_range = in_range;
  });
  TORCH_CHECK(all_in_range, "every edge of part t must group into the nodes [bounds[t], bounds[t + 1]) and read a row of node");
}

// sums[k] += exp(d[i, j] - m[j]) * s[i, j] for the rows i = listed[0 .. count) in order, columns
// [begin, end), k = j - begin; rows with s = 0 (nodes without edges, whose d may be NaN) add
// nothing, so the list may leave them out. y and e are kBlockRows * (end - begin) doubles of scratch,
// e followed by kSumColumns more (add_chunk_sums).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void add_node_exp_sums(const T* d, const double* s, const T* m,
                                                                         const int64_t* listed, int64_t count,
                                                                         int64_t cols, int64_t begin,
                                                                         int64_t end, double* __restrict__ sums,
                                                                         double* __restrict__ y, double* __restrict__ e) {
  const int64_t width = end - begin;
  if (width <= 0) return;
  for (int64_t r0 = 0; r0 < count; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, count - r0);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t row = listed[r0 + b] * cols;
      for (int64_t j = begin; j < end; ++j) {
        const T x = static_cast<T>(d[row + j] - m[j]);
        // exp(0) * 0 adds 0. A bit mask rather than ?: which GCC does not vectorise here.
        const double term_y = static_cast<double>(x);
        uint64_t bits;
        std::memcpy(&bits, &term_y, sizeof bits);
        bits &= -static_cast<uint64_t>(s[row + j] != 0.0);
        std::memcpy(&y[b * width + j - begin], &bits, sizeof bits);
      }
    }
    exp_block(y, e, n * width);
    for (int64_t b = 0; b < n; ++b) {
      const double* sb = s + listed[r0 + b] * cols + begin;
      for (int64_t k = 0; k < width; ++k) e[b * width + k] *= sb[k];
    }
    add_chunk_sums(e, n, width, 0, width, sums);
  }
}

// The exp-sums of both message directions, (2, cols) float64, from the nodes. Direction d's
// messages are x_e = node_d[row(e)] - ce[e] for the rows its node array is read by; the sum over
// edges of exp(x_e - m_d) groups by that row u: exp(diff_d[u] - m_d), where diff_d[u] =
// node_d[u] - ce_min_d[u] (prepare_messages), times group_sums_d[u] (group_exp_sums: the sum of
// exp(ce_min_d[u] - ce[e]) over u's edges), for the nodes u with edges (d_listed, increasing: the
// others' group sums are 0). Threads split the (direction, column) pairs; each sum adds its nodes
// in node order.
at::Tensor node_exp_sums(at::Tensor forward_diff, at::Tensor forward_group_sums, at::Tensor forward_max,
                            at::Tensor forward_listed, at::Tensor reverse_diff, at::Tensor reverse_group_sums,
                            at::Tensor reverse_max, at::Tensor reverse_listed, int64_t threads) {
  check_matrix(forward_diff, "forward_diff");
  check_matrix(reverse_diff, "reverse_diff");
  const int64_t rows = forward_diff.size(0), cols = forward_diff.size(1);
  TORCH_CHECK(reverse_diff.sizes() == forward_diff.sizes() && reverse_diff.scalar_type() == forward_diff.scalar_type(),
              "node arrays must be (nodes, pattern edges) of one dtype");
  for (const auto* x : {&forward_group_sums, &reverse_group_sums})
    TORCH_CHECK(x->sizes() == forward_diff.sizes() && x->scalar_type() == at::kDouble && x->is_contiguous(),
                "group sums must be contiguous float64 (nodes, pattern edges)");
  for (const auto* x : {&forward_listed, &reverse_listed}) {
    TORCH_CHECK(x->device().is_cpu() && x->dim() == 1 && x->is_contiguous() && x->scalar_type() == at::kLong,
                "listed nodes must be a contiguous int64 vector");
    const int64_t* listed = x->data_ptr<int64_t>();
    for (int64_t k = 0; k < x->size(0); ++k)
      TORCH_CHECK(listed[k] >= 0 && listed[k] < rows && (k == 0 || listed[k - 1] < listed[k]),
                  "listed nodes must be increasing node indices");
  }
  auto sums = at::zeros({2, cols}, at::dtype(at::kDouble));
  const int parts = threads_of(threads);
  dispatch_float(forward_diff.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    double* sp = sums.data_ptr<double>();
    auto scratch = exp_scratch(parts, widest_share(2 * cols, parts));
    const int64_t block = scratch.size(2);
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      // Part t takes a contiguous share of the 2 * cols (direction, column) pairs.
      const auto [begin, end] = share(2 * cols, t, parts);
      const int64_t f0 = std::min(begin, cols), f1 = std::min(end, cols);
      const int64_t r0 = std::max(begin, cols) - cols, r1 = std::max(end, cols) - cols;
      double* y = scratch.data_ptr<double>() + t * 2 * block;
      add_node_exp_sums(forward_diff.data_ptr<scalar_t>(), forward_group_sums.data_ptr<double>(),
                        forward_max.data_ptr<scalar_t>(), forward_listed.data_ptr<int64_t>(), forward_listed.size(0),
                        cols, f0, f1, sp + f0, y, y + block);
      add_node_exp_sums(reverse_diff.data_ptr<scalar_t>(), reverse_group_sums.data_ptr<double>(),
                        reverse_max.data_ptr<scalar_t>(), reverse_listed.data_ptr<int64_t>(), reverse_listed.size(0),
                        cols, r0, r1, sp + cols + r0, y, y + block);
    }
  });
  return sums;
}

// raw = fmax(floor, normalise(raw)) in place: the per-node maxima of the normalised messages.
void normalise_maxima_(at::Tensor raw, at::Tensor m, at::Tensor sums, at::Tensor floor, bool stable,
                       int64_t threads) {
  check_matrix(raw, "raw");
  const int64_t rows = raw.size(0), cols = raw.size(1);
  check_normalisation(raw, m, sums, floor);
  dispatch_float(raw.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    scalar_t* rp = raw.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    const scalar_t* fp = floor.data_ptr<scalar_t>();
    const double* sp = sums.data_ptr<double>();
    auto log_sum_tensor = at::empty({cols}, raw.options());
    scalar_t* log_sum = log_sum_tensor.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) log_sum[j] = std::log(static_cast<scalar_t>(sp[j]));
#pragma omp parallel num_threads(threads_of(threads))
    {
      const auto [begin, end] = share(rows, omp_get_thread_num(), omp_get_num_threads());
      normalise_rows(rp, begin, end, cols, mp, log_sum, fp, stable);
    }
  });
}

// The rows [begin, end) of mu = -cv plus the message maxima, each pattern node k adding its terms
// in the order of the pattern-edge loop (for j: mu[:, dst_j] += fmax[:, j]; mu[:, src_j] +=
// rmax[:, j]): term t of terms[term_starts[k] .. term_starts[k + 1]) is column term_columns[t] of
// fmax (term_from_rmax[t] = 0) or rmax (1). Four rows at a time, which share each term's lookup;
// each sum stays in a register.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void belief_rows(const T* __restrict__ cv, const T* __restrict__ fmax,
                                                                   const T* __restrict__ rmax,
                                                                   const int64_t* __restrict__ term_starts,
                                                                   const int64_t* __restrict__ term_columns,
                                                                   const int64_t* __restrict__ term_from_rmax,
                                                                   int64_t begin, int64_t end, int64_t nodes,
                                                                   int64_t cols, T* __restrict__ mu) {
  const T* arrays[2] = {fmax, rmax};
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    for (int64_t k = 0; k < nodes; ++k) {
      const T* c = cv + i * nodes + k;
      T total0 = -c[0], total1 = -c[nodes], total2 = -c[2 * nodes], total3 = -c[3 * nodes];
      for (int64_t t = term_starts[k]; t < term_starts[k + 1]; ++t) {
        const T* term = arrays[term_from_rmax[t]] + i * cols + term_columns[t];
        total0 += term[0];
        total1 += term[cols];
        total2 += term[2 * cols];
        total3 += term[3 * cols];
      }
      T* out = mu + i * nodes + k;
      out[0] = total0;
      out[nodes] = total1;
      out[2 * nodes] = total2;
      out[3 * nodes] = total3;
    }
  }
  for (; i < end; ++i) {
    for (int64_t k = 0; k < nodes; ++k) {
      T total = -cv[i * nodes + k];
      for (int64_t t = term_starts[k]; t < term_starts[k + 1]; ++t)
        total += arrays[term_from_rmax[t]][i * cols + term_columns[t]];
      mu[i * nodes + k] = total;
    }
  }
}

// The end of an iteration in one pass over blocks of rows: fmax and rmax (raw maxima) normalised
// in place as normalise_maxima_ does, each with its column maxima, exp-sums and floors; then mu =
// -cv plus, pattern edge by pattern edge in order, mu[:, dst_j] += fmax[:, j] and mu[:, src_j] +=
// rmax[:, j]. Returns mu's column maxima as column_max takes them (rows shared alike, combined in
// order), for normprob_.
at::Tensor update_beliefs_(at::Tensor mu, at::Tensor cv, at::Tensor fmax, at::Tensor forward_max,
                              at::Tensor forward_sums, at::Tensor forward_floor, at::Tensor rmax,
                              at::Tensor reverse_max, at::Tensor reverse_sums, at::Tensor reverse_floor,
                              at::Tensor pattern_src_tensor, at::Tensor pattern_dst_tensor, bool stable,
                              int64_t threads) {
  check_matrix(cv, "cv");
  check_matrix(mu, "mu");
  check_matrix(fmax, "fmax");
  check_matrix(rmax, "rmax");
  TORCH_CHECK(mu.sizes() == cv.sizes() && mu.scalar_type() == cv.scalar_type(), "mu must match cv");
  TORCH_CHECK(rmax.sizes() == fmax.sizes() && fmax.size(0) == cv.size(0) && fmax.scalar_type() == cv.scalar_type() &&
                  rmax.scalar_type() == cv.scalar_type(),
              "fmax and rmax must be (nodes, pattern edges) of cv's dtype");
  const int64_t rows = cv.size(0), nodes = cv.size(1), cols = fmax.size(1);
  check_normalisation(fmax, forward_max, forward_sums, forward_floor);
  check_normalisation(rmax, reverse_max, reverse_sums, reverse_floor);
  check_index(pattern_src_tensor, cols, "pattern_src");
  check_index(pattern_dst_tensor, cols, "pattern_dst");
  const int64_t* pattern_src = pattern_src_tensor.data_ptr<int64_t>();
  const int64_t* pattern_dst = pattern_dst_tensor.data_ptr<int64_t>();
  for (int64_t j = 0; j < cols; ++j)
    TORCH_CHECK(pattern_src[j] >= 0 && pattern_src[j] < nodes && pattern_dst[j] >= 0 && pattern_dst[j] < nodes,
                "pattern edges must join pattern nodes");
  // Each pattern node's terms in the loop's order.
  auto term_starts_tensor = at::empty({nodes + 1}, at::dtype(at::kLong));
  auto terms_tensor = at::empty({2, 2 * cols}, at::dtype(at::kLong));
  int64_t* term_starts = term_starts_tensor.data_ptr<int64_t>();
  int64_t* term_columns = terms_tensor.data_ptr<int64_t>();
  int64_t* term_from_rmax = term_columns + 2 * cols;
  int64_t count = 0;
  for (int64_t k = 0; k < nodes; ++k) {
    term_starts[k] = count;
    for (int64_t j = 0; j < cols; ++j) {
      if (pattern_dst[j] == k) term_columns[count] = j, term_from_rmax[count++] = 0;
      if (pattern_src[j] == k) term_columns[count] = j, term_from_rmax[count++] = 1;
    }
  }
  term_starts[nodes] = count;
  auto out = at::empty({nodes}, cv.options());
  dispatch_float(cv.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t lowest = std::numeric_limits<scalar_t>::lowest();
    const int parts = threads_of(threads);
    auto log_sums_tensor = at::empty({2, cols}, cv.options());
    scalar_t* log_sums = log_sums_tensor.data_ptr<scalar_t>();
    const double* fs = forward_sums.data_ptr<double>();
    const double* rs = reverse_sums.data_ptr<double>();
    for (int64_t j = 0; j < cols; ++j) {
      log_sums[j] = std::log(static_cast<scalar_t>(fs[j]));
      log_sums[cols + j] = std::log(static_cast<scalar_t>(rs[j]));
    }
    at::Tensor partial = at::full({parts, nodes}, lowest, cv.options());
    scalar_t* pp = partial.data_ptr<scalar_t>();
    scalar_t* fp = fmax.data_ptr<scalar_t>();
    scalar_t* rp = rmax.data_ptr<scalar_t>();
    scalar_t* mp = mu.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [begin, end] = share(rows, t, parts);
      // Blocks small enough that the maxima are still in cache when the beliefs read them.
      for (int64_t first = begin; first < end; first += kBlockRows) {
        const int64_t last = std::min(first + kBlockRows, end);
        normalise_rows(fp, first, last, cols, forward_max.data_ptr<scalar_t>(), log_sums,
                       static_cast<const scalar_t*>(forward_floor.data_ptr<scalar_t>()), stable);
        normalise_rows(rp, first, last, cols, reverse_max.data_ptr<scalar_t>(), log_sums + cols,
                       static_cast<const scalar_t*>(reverse_floor.data_ptr<scalar_t>()), stable);
        belief_rows(cv.data_ptr<scalar_t>(), static_cast<const scalar_t*>(fp), static_cast<const scalar_t*>(rp),
                    static_cast<const int64_t*>(term_starts), static_cast<const int64_t*>(term_columns),
                    static_cast<const int64_t*>(term_from_rmax), first, last, nodes, cols,
                    mp);
        column_max_rows(static_cast<const scalar_t*>(mp), static_cast<const int64_t*>(nullptr), first, last, nodes,
                        pp + t * nodes);
      }
    }
    combine_partial_maxima(static_cast<const scalar_t*>(pp), parts, nodes, out.data_ptr<scalar_t>());
  });
  return out;
}

// C printf("%e\n") of every value (float64, row-major), as one byte string.
pybind11::bytes format_e(at::Tensor x, int64_t threads) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == at::kDouble, "x must be contiguous float64");
  const double* xp = x.data_ptr<double>();
  const int64_t n = x.numel();
  const int parts = threads_of(threads);
  std::vector<std::string> pieces(parts);
#pragma omp parallel num_threads(parts)
  {
    const int t = omp_get_thread_num();
    const auto [begin, end] = share(n, t, omp_get_num_threads());
    std::string& text = pieces[t];
    text.reserve((end - begin) * 14);
    // std::to_chars with a precision is exact (the correctly rounded decimal, as glibc's printf
    // prints it) and writes the same "d.dddddde+XX", "inf", "nan" and "-nan" as %e, several
    // times faster.
    char buffer[64];
    for (int64_t i = begin; i < end; ++i) {
      char* last = std::to_chars(buffer, buffer + sizeof buffer - 1, xp[i], std::chars_format::scientific, 6).ptr;
      *last++ = '\n';
      text.append(buffer, last - buffer);
    }
  }
  std::string all;
  size_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  all.reserve(total);
  for (const auto& piece : pieces) all += piece;
  return pybind11::bytes(all);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "application classification kernels (OpenMP)";
  m.def("distances", &distances, "Euclidean distances between the rows of two matrices", pybind11::arg("at"),
        pybind11::arg("b"), pybind11::arg("threads"), pybind11::arg("positions") = pybind11::none());
  m.def("column_max", &column_max, "per-column maximum, NaN ignored, floored at the lowest finite value",
        pybind11::arg("x"), pybind11::arg("threads"), pybind11::arg("positions") = pybind11::none());
  m.def("normprob_", &normprob_, "column-wise log-softmax in place", pybind11::arg("x"), pybind11::arg("stable"),
        pybind11::arg("threads"), pybind11::arg("column_max") = pybind11::none(),
        pybind11::arg("positions") = pybind11::none());
  m.def("group_min", &group_min, "per-node minimum of grouped rows", pybind11::arg("x"), pybind11::arg("groups"),
        pybind11::arg("num_nodes"), pybind11::arg("bounds"), pybind11::arg("positions") = pybind11::none());
  m.def("prepare_messages", &prepare_messages, "node-side messages of an iteration and their four column maxima");
  m.def("group_exp_sums", &group_exp_sums, "per-node sums of exp(ce_min - ce) over each node's edges",
        pybind11::arg("ce"), pybind11::arg("groups"), pybind11::arg("ce_min"), pybind11::arg("bounds"),
        pybind11::arg("positions") = pybind11::none());
  m.def("scatter_max_", &scatter_max_, "per-node maxima of gathered node rows minus edge rows, into raw");
  m.def("node_exp_sums", &node_exp_sums, "exp-sums of both message directions, from the nodes");
  m.def("normalise_maxima_", &normalise_maxima_, "normalise raw maxima in place, floored");
  m.def("update_beliefs_", &update_beliefs_, "normalised message maxima and beliefs, into mu; mu's column maxima");
  m.def("format_e", &format_e, "C %e lines of a float64 tensor");
  m.def("has_cuda_kernels", [] { return false; }, "whether this build holds CUDA kernels");
}
