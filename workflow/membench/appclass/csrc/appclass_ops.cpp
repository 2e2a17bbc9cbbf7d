// CPU kernels of the application-classification belief propagation (OpenMP), and their bindings.
//
// They compute what membench/appclass/reference.py computes, keeping the order of the operations
// whose order changes a double: feature distances summed feature by feature, every column sum
// taken row by row in row (edge) order, beliefs updated pattern edge by pattern edge, maxima with
// NumPy's fmax (NaN ignored, the earlier value kept on ties). Two changes of method, both exact
// up to the last bit of an exp or log:
//   * edge messages are never stored: the normalisation y -> log(exp(y - m)) - L is non-decreasing,
//     so the per-node maximum of normalised messages is the normalisation of the raw maximum, and
//     one pass over the edges accumulates the raw maxima and the exp-sums L;
//   * the column maximum m of the messages is taken over nodes: fl(v - c) is non-increasing in c,
//     so max over a node's edges of v[node] - ce[edge] is v[node] - min over its edges of ce.
// The exp inside the sums is a polynomial the compiler vectorises (within about 1 ulp of libm's);
// log(exp(y)) is y (within 1 ulp) except where exp(y) is subnormal or zero, where libm computes it
// exactly as the reference does (that is where PNNL's -inf and NaN come from).
//
// Parallel passes over the edges split columns, not edges, between threads: every thread reads
// all edges in order, so sums keep their order and no two threads write the same node row.
//
// Every buffer of the belief propagation, scratch included, is a torch tensor allocated by the
// calling thread before a parallel region (each part of the work gets its slice): the CPU
// allocator trace of the meter (the PyTorch profiler's memory events, which only see the thread
// that runs the profiler) then counts every byte these kernels hold. (format_e, which prints the
// result, keeps its text in std::string.)

#include <torch/extension.h>

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
constexpr int64_t kPrefetchEdges = 16;  // how far ahead the message pass fetches node rows

// exp(y) for y in [-708, 709] (normal results); other y are fixed up with std::exp by the caller.
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

// out[i] = exp(y[i]) for n values (vectorised, then the rare out-of-range values by libm). The AVX2
// clone runs where the CPU has it; without contraction into FMAs both clones round alike.
__attribute__((target_clones("avx2", "default"))) void exp_block(const double* y, double* out, int64_t n) {
  // The range test is folded into the vectorised loop; the scalar fix-up runs only when needed.
  int64_t outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = exp_normal(y[i]);
    outside |= !((y[i] >= -708.0) & (y[i] <= 709.0));
  }
  if (outside == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    if (!(y[i] >= -708.0 && y[i] <= 709.0)) out[i] = std::exp(y[i]);
  }
}

// log(exp(y)) as the reference computes it (see the header comment).
template <typename T>
inline T log_exp(T y) {
  // Below these exp is subnormal (or 0) and log(exp(y)) is no longer y to the last bit.
  const T normal_floor = sizeof(T) == 8 ? T(-708) : T(-87);
  if (y >= normal_floor) return y + T(0);  // + 0 turns -0 into +0, as log(exp(-0)) = log(1) = +0
  // log(exp(-inf)) = log(0) = -inf (a node without edges); libm gets there through a slow
  // divide-by-zero path.
  if (y == -std::numeric_limits<T>::infinity()) return y;
  return std::log(std::exp(y));
}

// NumPy's fmax(a, b): a unless a < b, NaN ignored.
template <typename T>
inline T fmax_keep(T a, T b) {
  return (a >= b || b != b) ? a : b;
}

// Calls body with a double or a float (pointer type tag) per the dtype. OpenMP pragmas cannot
// sit inside a macro argument such as AT_DISPATCH_FLOATING_TYPES's, hence this function.
template <typename Body>
void dispatch_float(torch::ScalarType dtype, Body body) {
  if (dtype == torch::kFloat64) {
    body(double{});
  } else {
    TORCH_CHECK(dtype == torch::kFloat32, "tensors must be float64 or float32");
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

// Per part of a blocked exp pass over columns: two (kBlockRows x width) double blocks (y, exp(y)).
torch::Tensor exp_scratch(int parts, int64_t width) {
  return torch::empty({parts, 2, kBlockRows * std::max<int64_t>(width, 1)}, torch::dtype(torch::kFloat64));
}

void check_matrix(const torch::Tensor& x, const char* name) {
  TORCH_CHECK(x.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), name, " must be a contiguous matrix");
  TORCH_CHECK(x.scalar_type() == torch::kFloat64 || x.scalar_type() == torch::kFloat32, name, " must be float64 or float32");
}

void check_index(const torch::Tensor& x, int64_t length, const char* name) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 1 && x.is_contiguous() && x.scalar_type() == torch::kInt64 && x.size(0) == length,
              name, " must be a contiguous int64 vector of length ", length);
}

// total[j] = sqrt(sum over f in order of (bt[f, j] - a[f])^2) for the P columns of bt (F, P).
// Vectorised over j, each sum adding its features in feature order (AVX2 where the CPU has it;
// without FMA contraction every width rounds alike).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void distance_row(const T* a, const T* bt, int64_t features, int64_t cols,
                                                                    T* total) {
  for (int64_t j = 0; j < cols; ++j) total[j] = 0;
  for (int64_t f = 0; f < features; ++f) {
    const T a_f = a[f];
    const T* b_f = bt + f * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const T diff = b_f[j] - a_f;
      total[j] += diff * diff;
    }
  }
  for (int64_t j = 0; j < cols; ++j) total[j] = std::sqrt(total[j]);
}

// Euclidean distances between rows of a (R, F) and rows of b (P, F): squares summed feature by feature.
torch::Tensor distances(torch::Tensor a, torch::Tensor b, int64_t threads) {
  check_matrix(a, "a");
  check_matrix(b, "b");
  TORCH_CHECK(a.size(1) == b.size(1) && a.scalar_type() == b.scalar_type(), "a and b need the same features and dtype");
  const int64_t rows = a.size(0), cols = b.size(0), features = a.size(1);
  auto out = torch::empty({rows, cols}, a.options());
  dispatch_float(a.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* ap = a.data_ptr<scalar_t>();
    const scalar_t* bp = b.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    // b transposed to (F, P): the innermost loop runs over pattern rows j, whose sums are
    // independent, so it vectorises while each sum still adds its features in feature order.
    // A tensor, not a std::vector: the allocator trace then counts it like every other buffer.
    auto transposed = torch::empty({features, cols}, b.options());
    scalar_t* bt = transposed.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t f = 0; f < features; ++f) bt[f * cols + j] = bp[j * features + f];
#pragma omp parallel for num_threads(threads_of(threads)) schedule(static)
    for (int64_t i = 0; i < rows; ++i) distance_row(ap + i * features, bt, features, cols, op + i * cols);
  });
  return out;
}

// Per-column maximum ignoring NaN, never below the lowest finite value (PNNL's atomic_fmax loop).
torch::Tensor column_max(torch::Tensor x, int64_t threads) {
  check_matrix(x, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty({cols}, x.options());
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const int parts = threads_of(threads);
    torch::Tensor partial = torch::full({parts, cols}, std::numeric_limits<scalar_t>::lowest(), x.options());
    scalar_t* pp = partial.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [begin, end] = share(rows, t, parts);
      scalar_t* mine = pp + t * cols;
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < cols; ++j) mine[j] = fmax_keep(mine[j], xp[i * cols + j]);
    }
    scalar_t* op = out.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) {
      scalar_t m = std::numeric_limits<scalar_t>::lowest();
      for (int t = 0; t < parts; ++t) m = fmax_keep(m, pp[t * cols + j]);
      op[j] = m;
    }
  });
  return out;
}

// The node side of an iteration in one pass over the rows: vf = mu[:, pattern_dst] - fmax and
// vr = mu[:, pattern_src] - rmax (written into vf and vr), and the column maxima, as column_max
// takes them (same row shares, NaN ignored, floored at the lowest finite value), of vf, vr,
// vr - ce_min_forward and vf - ce_min_src: the four rows of the returned (4, pattern edges) tensor.
torch::Tensor prepare_messages(torch::Tensor mu, torch::Tensor fmax, torch::Tensor rmax, torch::Tensor pattern_src_tensor,
                               torch::Tensor pattern_dst_tensor, torch::Tensor ce_min_forward, torch::Tensor ce_min_src,
                               torch::Tensor vf, torch::Tensor vr, int64_t threads) {
  check_matrix(mu, "mu");
  for (const auto* x : {&fmax, &rmax, &ce_min_forward, &ce_min_src, &vf, &vr}) {
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
  auto out = torch::empty({4, cols}, mu.options());
  dispatch_float(mu.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t lowest = std::numeric_limits<scalar_t>::lowest();
    const int parts = threads_of(threads);
    torch::Tensor partial = torch::full({parts, 4, cols}, lowest, mu.options());
    scalar_t* pp = partial.data_ptr<scalar_t>();
    const scalar_t* mup = mu.data_ptr<scalar_t>();
    const scalar_t* fp = fmax.data_ptr<scalar_t>();
    const scalar_t* rp = rmax.data_ptr<scalar_t>();
    const scalar_t* cfp = ce_min_forward.data_ptr<scalar_t>();
    const scalar_t* csp = ce_min_src.data_ptr<scalar_t>();
    scalar_t* vfp = vf.data_ptr<scalar_t>();
    scalar_t* vrp = vr.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      const auto [begin, end] = share(rows, t, parts);
      scalar_t* vf_max = pp + t * 4 * cols;
      scalar_t* vr_max = vf_max + cols;
      scalar_t* forward_max = vr_max + cols;
      scalar_t* reverse_max = forward_max + cols;
      for (int64_t i = begin; i < end; ++i) {
        const scalar_t* mu_row = mup + i * nodes;
        const int64_t row = i * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const scalar_t f = mu_row[pattern_dst[j]] - fp[row + j];
          const scalar_t r = mu_row[pattern_src[j]] - rp[row + j];
          vfp[row + j] = f;
          vrp[row + j] = r;
          vf_max[j] = fmax_keep(vf_max[j], f);
          vr_max[j] = fmax_keep(vr_max[j], r);
          forward_max[j] = fmax_keep(forward_max[j], static_cast<scalar_t>(r - cfp[row + j]));
          reverse_max[j] = fmax_keep(reverse_max[j], static_cast<scalar_t>(f - csp[row + j]));
        }
      }
    }
    scalar_t* op = out.data_ptr<scalar_t>();
    for (int64_t k = 0; k < 4 * cols; ++k) {
      scalar_t m = lowest;
      for (int t = 0; t < parts; ++t) m = fmax_keep(m, pp[t * 4 * cols + k]);
      op[k] = m;
    }
  });
  return out;
}

// sums[j - begin] += exp(x[i, j] - m[j]) for every row i in order, columns [begin, end); y and e
// are kBlockRows * (end - begin) doubles of scratch.
template <typename T>
void add_exp_sums(const T* x, int64_t rows, int64_t cols, int64_t begin, int64_t end, const T* m, double* sums,
                  double* y, double* e) {
  const int64_t width = end - begin;
  if (width <= 0) return;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = begin; j < end; ++j) y[b * width + j - begin] = static_cast<T>(x[(r0 + b) * cols + j] - m[j]);
    exp_block(y, e, n * width);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t k = 0; k < width; ++k) sums[k] += e[b * width + k];
  }
}

// Column-wise log-softmax in place: x = log(exp(x - m)) - log(sum exp(x - m)) (stable: x - m - log(..)).
void normprob_(torch::Tensor x, bool stable, int64_t threads) {
  const auto m = column_max(x, threads);
  const int64_t rows = x.size(0), cols = x.size(1);
  const int parts = threads_of(threads);
  auto sums = torch::zeros({cols}, torch::dtype(torch::kFloat64));
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    double* sp = sums.data_ptr<double>();
    {
      auto scratch = exp_scratch(parts, widest_share(cols, parts));
      double* scratch_p = scratch.data_ptr<double>();
      const int64_t block = scratch.size(2);
#pragma omp parallel for num_threads(parts) schedule(static)
      for (int t = 0; t < parts; ++t) {
        const auto [begin, end] = share(cols, t, parts);
        double* y = scratch_p + t * 2 * block;
        add_exp_sums(xp, rows, cols, begin, end, mp, sp + begin, y, y + block);
      }
    }
    auto log_sum_tensor = torch::empty({cols}, x.options());
    scalar_t* log_sum = log_sum_tensor.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) log_sum[j] = std::log(static_cast<scalar_t>(sp[j]));
#pragma omp parallel for num_threads(threads_of(threads)) schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const scalar_t y = xp[i * cols + j] - mp[j];
        xp[i * cols + j] = (stable ? y : log_exp(y)) - log_sum[j];
      }
    }
  });
}

// (num_nodes, cols): per node, the minimum of x's rows whose group is that node (+inf for none).
torch::Tensor group_min(torch::Tensor x, torch::Tensor groups, int64_t num_nodes, int64_t threads) {
  check_matrix(x, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  check_index(groups, rows, "groups");
  auto out = torch::full({num_nodes, cols}, std::numeric_limits<double>::infinity(), x.options());
  dispatch_float(x.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const int64_t* gp = groups.data_ptr<int64_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
#pragma omp parallel num_threads(threads_of(threads))
    {
      const auto [begin, end] = share(cols, omp_get_thread_num(), omp_get_num_threads());
      for (int64_t i = 0; i < rows; ++i) {
        scalar_t* o = op + gp[i] * cols;
        for (int64_t j = begin; j < end; ++j) o[j] = std::min(o[j], xp[i * cols + j]);
      }
    }
  });
  return out;
}

// One direction of messages: x_e = node[row(e)] - ce[e]; raw[group(e)] = max x_e; sums += exp(x_e - m).
// y and e are kBlockRows * (end - begin) doubles of scratch.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void message_columns(const T* ce, const int64_t* rows_of,
                                                                       const int64_t* groups, const T* node, const T* m,
                                                                       int64_t edges, int64_t cols, int64_t begin,
                                                                       int64_t end, T* raw, double* sums, double* y,
                                                                       double* e) {
  const int64_t width = end - begin;
  if (width <= 0) return;
  for (int64_t e0 = 0; e0 < edges; e0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, edges - e0);
    for (int64_t b = 0; b < n; ++b) {
      // The node rows are gathered and scattered at random (by destination): fetch them ahead.
      if (e0 + b + kPrefetchEdges < edges) {
        const int64_t ahead = e0 + b + kPrefetchEdges;
        const char* v_ahead = reinterpret_cast<const char*>(node + rows_of[ahead] * cols + begin);
        const char* r_ahead = reinterpret_cast<const char*>(raw + groups[ahead] * cols + begin);
        for (int64_t offset = 0; offset < width * static_cast<int64_t>(sizeof(T)); offset += 64) {
          __builtin_prefetch(v_ahead + offset, 0);
          __builtin_prefetch(r_ahead + offset, 1);
        }
      }
      const T* c = ce + (e0 + b) * cols;
      const T* v = node + rows_of[e0 + b] * cols;
      T* r = raw + groups[e0 + b] * cols;
      double* yb = y + b * width - begin;
      for (int64_t j = begin; j < end; ++j) {
        const T x = v[j] - c[j];
        r[j] = fmax_keep(r[j], x);
        yb[j] = static_cast<T>(x - m[j]);
      }
    }
    exp_block(y, e, n * width);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t k = 0; k < width; ++k) sums[k] += e[b * width + k];
  }
}

// The fused edge pass of an iteration (and of the initialisation, with zero node arrays).
// Forward messages x = vr[forward_rows(e)] - ce[e], maximum by dst; reverse x = vf[src(e)] - ce[e],
// maximum by src. Writes the raw maxima (-inf where a node has no such edge) into forward_raw and
// reverse_raw (overwritten; reused across iterations, so no fresh pages are faulted in) and
// returns the exp-sums.
torch::Tensor message_pass(torch::Tensor ce, torch::Tensor forward_rows, torch::Tensor src, torch::Tensor dst,
                           torch::Tensor vr, torch::Tensor vf, torch::Tensor forward_max, torch::Tensor reverse_max,
                           torch::Tensor forward_raw, torch::Tensor reverse_raw, int64_t threads) {
  check_matrix(ce, "ce");
  check_matrix(vr, "vr");
  check_matrix(vf, "vf");
  check_matrix(forward_raw, "forward_raw");
  check_matrix(reverse_raw, "reverse_raw");
  const int64_t edges = ce.size(0), cols = ce.size(1);
  for (const auto* index : {&forward_rows, &src, &dst}) check_index(*index, edges, "edge index");
  TORCH_CHECK(vr.size(1) == cols && vf.sizes() == vr.sizes(), "node arrays must be (nodes, pattern edges)");
  TORCH_CHECK(forward_raw.sizes() == vr.sizes() && reverse_raw.sizes() == vr.sizes(), "outputs must be (nodes, pattern edges)");
  auto options = ce.options();
  forward_raw.fill_(-std::numeric_limits<double>::infinity());
  reverse_raw.fill_(-std::numeric_limits<double>::infinity());
  auto sums = torch::zeros({2, cols}, options.dtype(torch::kFloat64));
  const int parts = threads_of(threads);
  dispatch_float(ce.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* cp = ce.data_ptr<scalar_t>();
    double* sp = sums.data_ptr<double>();
    auto scratch = exp_scratch(parts, widest_share(2 * cols, parts));
    double* scratch_p = scratch.data_ptr<double>();
    const int64_t block = scratch.size(2);
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int t = 0; t < parts; ++t) {
      // Part t takes a contiguous share of the 2 * cols (direction, column) pairs.
      const auto [begin, end] = share(2 * cols, t, parts);
      const int64_t f0 = std::min(begin, cols), f1 = std::min(end, cols);
      const int64_t r0 = std::max(begin, cols) - cols, r1 = std::max(end, cols) - cols;
      double* y = scratch_p + t * 2 * block;
      message_columns(cp, forward_rows.data_ptr<int64_t>(), dst.data_ptr<int64_t>(), vr.data_ptr<scalar_t>(),
                      forward_max.data_ptr<scalar_t>(), edges, cols, f0, f1, forward_raw.data_ptr<scalar_t>(), sp + f0,
                      y, y + block);
      message_columns(cp, src.data_ptr<int64_t>(), src.data_ptr<int64_t>(), vf.data_ptr<scalar_t>(),
                      reverse_max.data_ptr<scalar_t>(), edges, cols, r0, r1, reverse_raw.data_ptr<scalar_t>(), sp + cols + r0,
                      y, y + block);
    }
  });
  return sums;
}

// raw = fmax(floor, normalise(raw)) in place: the per-node maxima of the normalised messages.
void normalise_maxima_(torch::Tensor raw, torch::Tensor m, torch::Tensor sums, torch::Tensor floor, bool stable,
                       int64_t threads) {
  check_matrix(raw, "raw");
  const int64_t rows = raw.size(0), cols = raw.size(1);
  dispatch_float(raw.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    scalar_t* rp = raw.data_ptr<scalar_t>();
    const scalar_t* mp = m.data_ptr<scalar_t>();
    const scalar_t* fp = floor.data_ptr<scalar_t>();
    const double* sp = sums.data_ptr<double>();
    auto log_sum_tensor = torch::empty({cols}, raw.options());
    scalar_t* log_sum = log_sum_tensor.data_ptr<scalar_t>();
    for (int64_t j = 0; j < cols; ++j) log_sum[j] = std::log(static_cast<scalar_t>(sp[j]));
#pragma omp parallel for num_threads(threads_of(threads)) schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const scalar_t y = rp[i * cols + j] - mp[j];
        rp[i * cols + j] = fmax_keep(fp[j], (stable ? y : log_exp(y)) - log_sum[j]);
      }
    }
  });
}

// mu = -cv (mu overwritten in place); for each pattern edge j in order: mu[:, dst_j] += fmax[:, j]; mu[:, src_j] += rmax[:, j].
void update_beliefs_(torch::Tensor mu, torch::Tensor cv, torch::Tensor fmax, torch::Tensor rmax,
                     torch::Tensor pattern_src_tensor, torch::Tensor pattern_dst_tensor, int64_t threads) {
  check_matrix(cv, "cv");
  check_matrix(mu, "mu");
  TORCH_CHECK(mu.sizes() == cv.sizes() && mu.scalar_type() == cv.scalar_type(), "mu must match cv");
  const int64_t rows = cv.size(0), nodes = cv.size(1), pattern_edges = fmax.size(1);
  check_index(pattern_src_tensor, pattern_edges, "pattern_src");
  check_index(pattern_dst_tensor, pattern_edges, "pattern_dst");
  const int64_t* pattern_src = pattern_src_tensor.data_ptr<int64_t>();
  const int64_t* pattern_dst = pattern_dst_tensor.data_ptr<int64_t>();
  dispatch_float(cv.scalar_type(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* cp = cv.data_ptr<scalar_t>();
    const scalar_t* fp = fmax.data_ptr<scalar_t>();
    const scalar_t* rp = rmax.data_ptr<scalar_t>();
    scalar_t* mp = mu.data_ptr<scalar_t>();
#pragma omp parallel for num_threads(threads_of(threads)) schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      scalar_t* row = mp + i * nodes;
      for (int64_t k = 0; k < nodes; ++k) row[k] = -cp[i * nodes + k];
      for (int64_t j = 0; j < pattern_edges; ++j) {
        row[pattern_dst[j]] += fp[i * pattern_edges + j];
        row[pattern_src[j]] += rp[i * pattern_edges + j];
      }
    }
  });
}

// C printf("%e\n") of every value (float64, row-major), as one byte string.
pybind11::bytes format_e(torch::Tensor x, int64_t threads) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat64, "x must be contiguous float64");
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
  m.def("distances", &distances, "Euclidean distances between the rows of two matrices");
  m.def("column_max", &column_max, "per-column maximum, NaN ignored, floored at the lowest finite value");
  m.def("normprob_", &normprob_, "column-wise log-softmax in place");
  m.def("group_min", &group_min, "per-node minimum of grouped rows");
  m.def("prepare_messages", &prepare_messages, "node-side messages of an iteration and their four column maxima");
  m.def("message_pass", &message_pass, "fused edge pass: raw per-node maxima (into the outputs) and exp-sums of both messages");
  m.def("normalise_maxima_", &normalise_maxima_, "normalise raw maxima in place, floored");
  m.def("update_beliefs_", &update_beliefs_, "beliefs from node distances and message maxima, into mu");
  m.def("format_e", &format_e, "C %e lines of a float64 tensor");
  m.def("has_cuda_kernels", [] { return false; }, "whether this build holds CUDA kernels");
}
