// Digests of every output of DIVISION's baseline CPU kernels (division_cpu_baseline.cpp) on fixed
// inputs, one line per output: `<case> <output> <FNV-1a 64 of its bytes>`. Built for x86-64, where the
// baseline is SSE2 and bit-exact with the pure-torch reference (tests/division/test_kernels.py), and
// for AArch64, where the same source is NEON, and run there under qemu-user:
// tests/division/test_kernels_aarch64.py compares the two. Linked without libtorch, so the few
// threading and error symbols the kernels use are defined here: one thread, errors printed.
// Includes a NaN, an infinity and a minus infinity in half of the maps.

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include "division_common.h"
#include "division_cpu_kernels.h"

namespace at {
int get_num_threads() { return 1; }
int get_thread_num() { return 0; }
void init_num_threads() {}
bool in_parallel_region() { return false; }
namespace internal {
void set_thread_num(int) {}
}  // namespace internal
}  // namespace at

namespace c10 {
ParallelGuard::ParallelGuard(bool) : previous_state_(false) {}
ParallelGuard::~ParallelGuard() = default;
namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, uint32_t line, const std::string& message) {
  std::fprintf(stderr, "%s:%u %s: %s\n", file, line, func, message.c_str());
  std::exit(3);
}
}  // namespace detail
}  // namespace c10

namespace {

uint64_t digest(const void* data, size_t bytes) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001B3ull;
  return hash;
}

// The digest of an output; a NaN counts as one NaN whatever its bits, which are the CPU's own (x86's
// default NaN is negative, ARM's positive), as the reference's tests compare them.
template <typename T>
void print(const std::string& name, const char* output, std::vector<T> values) {
  if constexpr (!std::is_same_v<T, uint8_t>) {
    for (T& value : values) {
      if (std::isnan(static_cast<float>(value))) value = static_cast<T>(NAN);
    }
  }
  std::printf("%s %s %016" PRIx64 "\n", name.c_str(), output, digest(values.data(), values.size() * sizeof(T)));
}

// Normal-like values (the sum of four uniforms of a 64-bit LCG), times 3 plus 1, every seventh -0;
// with `special`, a NaN, an infinity and a minus infinity in the first planes.
std::vector<float> map_values(int64_t count, uint64_t seed, bool special) {
  std::vector<float> values(count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int k = 0; k < 4; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      sum += static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
    }
    values[i] = i % 7 == 0 ? -0.0f : (sum - 2.0f) * 3.0f + 1.0f;
  }
  if (special && count > 40) {
    values[3] = NAN;
    values[17] = INFINITY;
    values[count - 5] = -INFINITY;
  }
  return values;
}

template <typename scalar_t>
std::vector<scalar_t> converted(const std::vector<float>& values) {
  return std::vector<scalar_t>(values.begin(), values.end());
}

constexpr uint64_t kSeed = 0x123456789ABCDEF0ull, kOffset = 0x0FEDCBA987654321ull;

template <typename scalar_t>
void run(c10::ScalarType dtype, const char* type_name) {
  const membench::CpuKernels& k = membench::cpu_baseline::kernels();
  const int64_t shapes[][4] = {{2, 3, 17, 13}, {1, 2, 56, 56}, {8, 4, 7, 7},  {2, 2, 3, 300},
                               {1, 1, 1, 1},   {3, 7, 2, 3},   {2, 9, 4, 8},  {2, 3, 28, 28}};
  int index = 0;
  for (const auto& shape : shapes) {
    for (const bool special : {false, true}) {
      const int64_t planes = shape[0] * shape[1], height = shape[2], width = shape[3], area = height * width;
      const int64_t numel = planes * area;
      const auto x = converted<scalar_t>(map_values(numel, index++, special));
      const std::string base = std::string(type_name) + "/" + std::to_string(shape[0]) + "x" +
                               std::to_string(shape[1]) + "x" + std::to_string(height) + "x" + std::to_string(width) +
                               (special ? "/special" : "");
      for (const int bits : {1, 2, 4, 8}) {
        const std::string name = base + "/bits" + std::to_string(bits);
        const int64_t block = 8;
        int64_t tile_h, tile_w;
        membench::lfc_tile(height, width, block, tile_h, tile_w);
        const int64_t tiles = ((height + tile_h - 1) / tile_h) * ((width + tile_w - 1) / tile_w);
        std::vector<c10::BFloat16> lfc(planes * tiles), minimum(planes), scale(planes);
        std::vector<uint8_t> packed(planes * membench::packed_row_bytes(area, bits));
        k.division_compress(dtype, bits, x.data(), planes, height, width, block, kSeed, kOffset, lfc.data(),
                            packed.data(), minimum.data(), scale.data());
        print(name, "division_lfc", lfc);
        print(name, "division_packed", packed);
        print(name, "division_minimum", minimum);
        print(name, "division_scale", scale);
        std::vector<scalar_t> restored(numel);
        k.division_decompress(dtype, bits, lfc.data(), packed.data(), minimum.data(), scale.data(), planes, height,
                              width, block, restored.data());
        print(name, "division_restored", restored);
        for (const int64_t group_size : {600, 256, 100, 33, 8}) {
          const std::string group = name + "/group" + std::to_string(group_size);
          const int64_t groups = (numel + group_size - 1) / group_size;
          std::vector<uint8_t> group_packed(groups * membench::packed_row_bytes(group_size, bits));
          std::vector<c10::BFloat16> group_minimum(groups), group_scale(groups);
          k.group_compress(dtype, bits, x.data(), numel, group_size, groups, kSeed, kOffset, group_packed.data(),
                           group_minimum.data(), group_scale.data());
          print(group, "group_packed", group_packed);
          print(group, "group_minimum", group_minimum);
          print(group, "group_scale", group_scale);
          std::vector<scalar_t> group_restored(numel);
          k.group_decompress(dtype, bits, group_packed.data(), group_minimum.data(), group_scale.data(), numel,
                             group_size, groups, group_restored.data());
          print(group, "group_restored", group_restored);
        }
      }
      std::vector<scalar_t> out(numel), grad_in(numel);
      std::vector<uint8_t> mask((numel + 7) / 8);
      const auto grad = converted<scalar_t>(map_values(numel, 1000 + index, false));
      k.relu_pack(dtype, x.data(), numel, out.data(), mask.data());
      print(base, "relu_out", out);
      print(base, "relu_mask", mask);
      k.masked_grad(dtype, grad.data(), mask.data(), numel, 1.0f, grad_in.data());
      print(base, "relu_grad", grad_in);
      for (const float p : {0.7f, 0.1f}) {
        const std::string name = base + "/dropout" + std::to_string(p);
        const float gain = static_cast<float>(1.0 / (1.0 - p));
        k.dropout_pack(dtype, x.data(), numel, p, gain, kSeed, kOffset, out.data(), mask.data());
        print(name, "dropout_out", out);
        print(name, "dropout_mask", mask);
        k.masked_grad(dtype, grad.data(), mask.data(), numel, gain, grad_in.data());
        print(name, "dropout_grad", grad_in);
      }
    }
  }
}

}  // namespace

int main() {
  run<float>(c10::ScalarType::Float, "float32");
  run<c10::Half>(c10::ScalarType::Half, "float16");
  run<c10::BFloat16>(c10::ScalarType::BFloat16, "bfloat16");
  return 0;
}
