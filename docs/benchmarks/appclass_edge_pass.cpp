// The figures of docs/benchmarks/appclass.md that come from a program of their own: this VM's read
// rate, and the edge pass (scatter_max_part of workflow/membench/appclass/csrc/appclass_ops.cpp)
// with other prefetch hints, and with its rows in cache. The loop below is the kernel's, with the
// prefetch hints and distance as template parameters; every variant that reads the real rows must
// give the kernel's result bit for bit. Build and run (the arrays come from the script in
// appclass.md):
//   g++ -O3 -fopenmp -std=c++17 appclass_edge_pass.cpp -o edge_pass && ./edge_pass DIR
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

template <class T>
std::vector<T> load(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  std::fseek(f, 0, SEEK_END);
  const long bytes = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<T> v(bytes / sizeof(T));
  if (std::fread(v.data(), 1, bytes, f) != static_cast<size_t>(bytes)) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
  return v;
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Hints are __builtin_prefetch's locality (3: prefetcht0 .. 0: prefetchnta), -1 for no prefetch.
// in_cache_mask -1 reads the real rows; 255 reads the distances and source rows from 256 rows
// that stay in cache, fetched ahead too (the result is then wrong: a measurement of the work
// alone). cols is a run-time value, as in the kernel: GCC unrolls a constant 21 into slower code.
template <int CeHint, int SourceHint, int RawHint, int Ahead>
__attribute__((target_clones("avx2", "default"))) void edge_pass_part(const double* ce, const int64_t* rows_of,
                                                                      const int64_t* groups, const double* node,
                                                                      int64_t num_rows, int64_t begin, int64_t end,
                                                                      int64_t first, int64_t last, int64_t cols,
                                                                      double* raw, int64_t in_cache_mask) {
  for (int64_t e = begin; e < end; ++e) {
    if (e + Ahead < end) {
      const int64_t ahead = e + Ahead;
      const int64_t source_ahead = std::clamp<int64_t>(rows_of[ahead], 0, num_rows - 1) & in_cache_mask;
      const char* c_ahead = reinterpret_cast<const char*>(ce + (ahead & in_cache_mask) * cols);
      const char* v_ahead = reinterpret_cast<const char*>(node + source_ahead * cols);
      const char* r_ahead = reinterpret_cast<const char*>(raw + std::clamp<int64_t>(groups[ahead], first, last - 1) * cols);
      for (int64_t offset = 0; offset < cols * static_cast<int64_t>(sizeof(double)); offset += 64) {
        if constexpr (CeHint >= 0) __builtin_prefetch(c_ahead + offset, 0, CeHint);
        if constexpr (SourceHint >= 0) __builtin_prefetch(v_ahead + offset, 0, SourceHint);
        if constexpr (RawHint >= 0) __builtin_prefetch(r_ahead + offset, 1, RawHint);
      }
    }
    const int64_t g = groups[e], u = rows_of[e];
    if (g < first || g >= last || u < 0 || u >= num_rows) continue;
    const double* c = ce + (e & in_cache_mask) * cols;
    const double* v = node + (u & in_cache_mask) * cols;
    double* r = raw + g * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const double value = v[j] - c[j];
      r[j] = value > r[j] ? value : r[j];
    }
  }
}

struct Graph {
  std::vector<double> ce, vr, expected;
  std::vector<int64_t> src, dst, bounds, edge_bounds;
  int64_t cols() const { return static_cast<int64_t>(ce.size() / src.size()); }
  int64_t nodes() const { return static_cast<int64_t>(vr.size()) / cols(); }
  int parts() const { return static_cast<int>(bounds.size()) - 1; }
};

// Part t of the edge pass, as scatter_max_ runs it: its rows of raw reset, then its edges.
template <int CeHint, int SourceHint, int RawHint, int Ahead>
void run_part(const Graph& g, int t, double* raw, int64_t in_cache_mask) {
  const int64_t first = g.bounds[t], last = g.bounds[t + 1];
  std::fill(raw + first * g.cols(), raw + last * g.cols(), -std::numeric_limits<double>::infinity());
  edge_pass_part<CeHint, SourceHint, RawHint, Ahead>(g.ce.data(), g.src.data(), g.dst.data(), g.vr.data(), g.nodes(),
                                                     g.edge_bounds[t], g.edge_bounds[t + 1], first, last, g.cols(), raw,
                                                     in_cache_mask);
}

// The best of five whole edge passes on 2 threads, the parts taken as they come free.
template <int CeHint, int SourceHint, int Ahead>
void time_edge_pass(const Graph& g, const char* name, std::vector<double>& raw) {
  double best_ms = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(2) schedule(dynamic, 1)
    for (int t = 0; t < g.parts(); ++t) run_part<CeHint, SourceHint, 3, Ahead>(g, t, raw.data(), -1);
    best_ms = std::min(best_ms, elapsed_ms(start));
  }
  const bool same = std::memcmp(raw.data(), g.expected.data(), raw.size() * sizeof(double)) == 0;
  std::printf("edge pass, %-48s %6.2f ms  %s\n", name, best_ms, same ? "the kernel's bits" : "DIFFERENT BITS");
}

// One sum over the distances with eight running sums, on 1 and 2 threads: the machine's read rate.
__attribute__((target_clones("avx2", "default"))) double sum(const double* x, int64_t n) {
  double running[8] = {0};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) running[k] += x[i + k];
  double total = 0;
  for (int k = 0; k < 8; ++k) total += running[k];
  return total;
}

void time_read_rate(const Graph& g) {
  const int64_t n = static_cast<int64_t>(g.ce.size());
  for (int threads : {1, 2}) {
    double best_ms = std::numeric_limits<double>::infinity(), total = 0;
    for (int run = 0; run < 3; ++run) {
      total = 0;
      const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const int t = omp_get_thread_num();
        total += sum(g.ce.data() + n * t / threads, n * (t + 1) / threads - n * t / threads);
      }
      best_ms = std::min(best_ms, elapsed_ms(start));
    }
    std::printf("read rate, %d thread(s): %.2f ms for %.0f MB, %.1f GB/s (sum %g)\n", threads, best_ms, n * 8 / 1e6,
                n * 8 / best_ms / 1e6, total);
  }
}

// Part 0 on one thread: one variant of the edge pass, the best of five.
template <int Hint>
void time_part_zero(const Graph& g, std::vector<double>& raw, int64_t in_cache_mask, const char* name) {
  const int64_t edges = g.edge_bounds[1] - g.edge_bounds[0];
  double best_ms = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    run_part<Hint, Hint, Hint, 16>(g, 0, raw.data(), in_cache_mask);
    best_ms = std::min(best_ms, elapsed_ms(start));
  }
  std::printf("part 0 (%ld edges), one thread, %-40s %.2f ms, %.1f ns an edge\n", static_cast<long>(edges), name,
              best_ms, best_ms * 1e6 / edges);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (ce.bin, vr.bin, src.bin, dst.bin, bounds.bin, edge_bounds.bin, expected.bin)\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Graph g{load<double>(dir, "ce.bin"),       load<double>(dir, "vr.bin"),        load<double>(dir, "expected.bin"),
          load<int64_t>(dir, "src.bin"),     load<int64_t>(dir, "dst.bin"),      load<int64_t>(dir, "bounds.bin"),
          load<int64_t>(dir, "edge_bounds.bin")};
  if (g.src.empty() || g.ce.size() % g.src.size() != 0 || g.vr.size() % g.cols() != 0 || g.expected.size() != g.vr.size()) {
    std::fprintf(stderr, "%s: the arrays' sizes do not fit together\n", dir.c_str());
    return 1;
  }
  std::vector<double> raw(g.vr.size());
  time_read_rate(g);
  for (int round = 0; round < 3; ++round) {
    time_edge_pass<3, 3, 16>(g, "as built (prefetcht0, 16 edges ahead)", raw);
    time_edge_pass<0, 3, 16>(g, "distances prefetchnta", raw);
    time_edge_pass<0, 2, 16>(g, "distances prefetchnta, sources prefetcht1", raw);
    time_edge_pass<1, 3, 16>(g, "distances prefetcht2", raw);
    time_edge_pass<0, 3, 32>(g, "distances prefetchnta, 32 edges ahead", raw);
    time_edge_pass<-1, 3, 16>(g, "distances not fetched ahead", raw);
  }
  for (int round = 0; round < 3; ++round) {
    time_part_zero<3>(g, raw, -1, "as built, streaming:");
    time_part_zero<3>(g, raw, 255, "as built, rows from 256 in cache:");
    time_part_zero<-1>(g, raw, 255, "nothing fetched ahead, rows in cache:");
  }
  return 0;
}
