// Just enough of CUDA to run membench's kernels (division_cuda.cu) on a CPU, for tests on machines
// without a GPU: every thread of a block is a fiber of one OS thread, the blocks of a launch run one
// after another, and the warp's collectives (__syncwarp, __shfl_xor_sync, __shfl_down_sync,
// __ballot_sync) and __syncthreads are barriers of the fibers they name. Each fiber runs until it
// waits, so a lane that reads what another has not written yet (a missing barrier) reads the wrong
// bytes. Arithmetic is the host's IEEE float32 (compiled with -ffp-contract=off, as nvcc is given
// --fmad=false).
//
// What it checks beyond the values: a collective that not every thread of its warp (or block)
// reaches is a deadlock on a GPU, here an error naming it; shared memory starts filled with 0xFF
// bytes (NaN as floats), so a kernel that reads what it did not write fails, and a block that
// writes past the shared memory its launch asked for is an error; a launch asks for no more
// threads or shared memory than an H100 allows. What it cannot check: timing, memory ordering
// between warps without a barrier, and the GPU's own conversions (it uses c10's, which round the
// same way).
//
// Include after ATen's headers and before the kernels' source, with MEMBENCH_CUDA_EMULATION defined.

#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

using std::isnan;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct __attribute__((aligned(16))) uint4 {
  uint32_t x, y, z, w;
};

// The executing thread's coordinates, set by the scheduler before it resumes a fiber.
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace cuda_on_cpu {

// An H100's limits (SXM, compute capability 9.0), which the launches' choices depend on, but one
// multiprocessor that holds one block at a time: a launch's persistent blocks are then as few as
// can be, and each team takes many rows in turn, as on a GPU for full-size maps, so that a row
// that reuses its team's shared memory before every lane is done with it fails the tests.
constexpr int64_t kSharedPerBlock = 227 * 1024;
constexpr int64_t kSharedPerMultiprocessor = 228 * 1024;
constexpr int kBlocksPerMultiprocessor = 32;
constexpr int kThreadsPerMultiprocessor = 2048;
constexpr int kMultiprocessors = 1;
constexpr size_t kFiberStackBytes = 256 * 1024;

// -- fibers: a stack each, and a switch between them ---------------------------------------------
//
// On x86-64 a switch saves the callee-saved registers on the stack it leaves and takes them from
// the one it enters: a few instructions, where ucontext's swapcontext makes a system call (for the
// signal mask) each time and took most of the emulation's time. Elsewhere, ucontext.

#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};

extern "C" void membench_fiber_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl membench_fiber_switch
    .type membench_fiber_switch, @function
membench_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size membench_fiber_switch, .-membench_fiber_switch
)");

inline void switch_context(Context& from, const Context& to) { membench_fiber_switch(&from.sp, to.sp); }

// A context that enters `entry` (which never returns) on `stack`: six zero registers for the switch
// to pop, then `entry` as its return address, with the stack aligned as at a call.
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top) - 8;
  std::fill(frame, frame + 8, 0);
  frame[6] = reinterpret_cast<uint64_t>(entry);
  c.sp = frame;
}
#else
struct Context {
  ucontext_t context;
};

inline void switch_context(Context& from, const Context& to) { swapcontext(&from.context, &to.context); }

inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.context);
  c.context.uc_stack.ss_sp = stack;
  c.context.uc_stack.ss_size = bytes;
  c.context.uc_link = nullptr;
  makecontext(&c.context, entry, 0);
}
#endif

enum class Wait { none, warp, block };

// Fiber stacks, allocated once and never cleared: the pages a fiber does not touch cost nothing.
inline std::vector<std::unique_ptr<char[]>> stacks;

inline char* fiber_stack(size_t thread) {
  while (stacks.size() <= thread) stacks.emplace_back(new char[kFiberStackBytes]);
  return stacks[thread].get();
}

struct Fiber {
  Context context;
  Wait waiting = Wait::none;
  bool done = false;
};

struct Block {
  std::vector<Fiber> fibers;
  Context scheduler;
  unsigned current = 0;
  std::function<void()> body;
  std::vector<int> warp_arrived;
  int block_arrived = 0;
  std::vector<uint64_t> exchange;  // one slot per thread, for the warp's collectives
  std::string error;               // set by a fiber that cannot go on, which then ends
};

inline Block* running = nullptr;

inline unsigned warp_of(unsigned thread) { return thread / 32; }
inline unsigned warp_size(const Block& b, unsigned warp) {
  return std::min<unsigned>(32, static_cast<unsigned>(b.fibers.size()) - 32 * warp);
}

// Parks the current fiber at a barrier of `kind`; the last to arrive releases the others.
inline void wait_at(Wait kind) {
  Block& b = *running;
  Fiber& self = b.fibers[b.current];
  self.waiting = kind;
  const unsigned warp = warp_of(b.current);
  const unsigned size = kind == Wait::warp ? warp_size(b, warp) : static_cast<unsigned>(b.fibers.size());
  int& arrived = kind == Wait::warp ? b.warp_arrived[warp] : b.block_arrived;
  if (static_cast<unsigned>(++arrived) == size) {
    arrived = 0;
    const unsigned first = kind == Wait::warp ? 32 * warp : 0;
    for (unsigned t = first; t < first + size; ++t) {
      if (b.fibers[t].waiting == kind) b.fibers[t].waiting = Wait::none;
    }
  }
  switch_context(self.context, b.scheduler);
}

// Ends the current fiber with an error that its launch raises.
[[noreturn]] inline void fail(const std::string& message) {
  Block& b = *running;
  b.error = "thread " + std::to_string(b.current) + " of block " + std::to_string(blockIdx.x) + ": " + message;
  b.fibers[b.current].done = true;
  switch_context(b.fibers[b.current].context, b.scheduler);
  std::abort();  // an ended fiber is not resumed
}

[[noreturn]] inline void trampoline() {
  running->body();
  Fiber& self = running->fibers[running->current];
  self.done = true;
  switch_context(self.context, running->scheduler);
  std::abort();
}

// Runs one block: every fiber in turn until it waits or ends, until all have ended.
inline void run_block(Block& b, unsigned block) {
  for (size_t t = 0; t < b.fibers.size(); ++t) {
    Fiber& f = b.fibers[t];
    f.waiting = Wait::none;
    f.done = false;
    make_context(f.context, fiber_stack(t), kFiberStackBytes, trampoline);
  }
  std::fill(b.warp_arrived.begin(), b.warp_arrived.end(), 0);
  b.block_arrived = 0;
  blockIdx.x = block;
  for (;;) {
    bool ran = false, all_done = true;
    for (unsigned t = 0; t < b.fibers.size(); ++t) {
      if (b.fibers[t].done) continue;
      all_done = false;
      if (b.fibers[t].waiting != Wait::none) continue;
      b.current = t;
      threadIdx.x = t;
      ran = true;
      switch_context(b.scheduler, b.fibers[t].context);
      if (!b.error.empty()) throw std::runtime_error(b.error);
    }
    if (all_done) return;
    if (!ran) {
      for (unsigned t = 0; t < b.fibers.size(); ++t) {
        if (!b.fibers[t].done && b.fibers[t].waiting != Wait::none) {
          throw std::runtime_error("block " + std::to_string(block) + ": thread " + std::to_string(t) +
                                   " waits at a " + (b.fibers[t].waiting == Wait::warp ? "warp" : "block") +
                                   " barrier that not every thread of its " +
                                   (b.fibers[t].waiting == Wait::warp ? "warp" : "block") + " reaches");
        }
      }
    }
  }
}

}  // namespace cuda_on_cpu

// The block's dynamic shared memory (blocks run one at a time): every kernel declares
// `extern __shared__ unsigned char shared[]` in the kernels' unnamed namespace, which this defines.
namespace {
__attribute__((aligned(16))) unsigned char shared[cuda_on_cpu::kSharedPerBlock];
}

inline void __syncthreads() { cuda_on_cpu::wait_at(cuda_on_cpu::Wait::block); }

inline void check_full_mask(unsigned mask) {
  if (mask != 0xFFFFFFFFu) cuda_on_cpu::fail("the emulation runs only whole-warp collectives");
}

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
  check_full_mask(mask);
  cuda_on_cpu::wait_at(cuda_on_cpu::Wait::warp);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  check_full_mask(mask);
  cuda_on_cpu::Block& b = *cuda_on_cpu::running;
  const unsigned thread = b.current, partner = (thread & ~31u) | ((thread & 31u) ^ (lane_mask & 31));
  std::memcpy(&b.exchange[thread], &value, sizeof(T));
  __syncwarp();
  T result;
  std::memcpy(&result, &b.exchange[partner], sizeof(T));
  __syncwarp();  // no slot is written again before every lane has read
  return result;
}

template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  check_full_mask(mask);
  cuda_on_cpu::Block& b = *cuda_on_cpu::running;
  const unsigned thread = b.current, lane = thread & 31u;
  const unsigned source = lane + delta < 32 ? thread + delta : thread;  // past the warp: the lane's own value
  std::memcpy(&b.exchange[thread], &value, sizeof(T));
  __syncwarp();
  T result;
  std::memcpy(&result, &b.exchange[source], sizeof(T));
  __syncwarp();
  return result;
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  check_full_mask(mask);
  cuda_on_cpu::Block& b = *cuda_on_cpu::running;
  const unsigned thread = b.current, first = thread & ~31u;
  b.exchange[thread] = predicate != 0;
  __syncwarp();
  unsigned bits = 0;
  for (unsigned lane = 0; lane < cuda_on_cpu::warp_size(b, thread / 32); ++lane) {
    bits |= static_cast<unsigned>(b.exchange[first + lane]) << lane;
  }
  __syncwarp();
  return bits;
}

template <typename T>
T __ldg(const T* p) {
  return *p;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return static_cast<uint32_t>((uint64_t{a} * b) >> 32); }
// Byte i of the result is byte (selector >> 4 i) & 7 of the eight bytes of x (0-3) and y (4-7).
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t result = 0;
  for (int i = 0; i < 4; ++i) result |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return result;
}
inline float __uint_as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// -- the runtime calls of the kernels' host code ----------------------------------------------------

enum cudaDeviceAttr {
  cudaDevAttrMaxSharedMemoryPerBlockOptin,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor,
  cudaDevAttrMaxBlocksPerMultiprocessor,
  cudaDevAttrMaxThreadsPerMultiProcessor,
  cudaDevAttrMultiProcessorCount,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
using cudaError_t = int;

inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int) {
  using namespace cuda_on_cpu;
  switch (attribute) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSharedPerMultiprocessor; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = kBlocksPerMultiprocessor; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = kThreadsPerMultiprocessor; break;
    case cudaDevAttrMultiProcessorCount: *value = kMultiprocessors; break;
  }
  return 0;
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int bytes) {
  if (bytes > cuda_on_cpu::kSharedPerBlock) throw std::runtime_error("more shared memory than a block may have");
  return 0;
}

// Resident blocks per multiprocessor: one (see kMultiprocessors).
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int, size_t) {
  *blocks = 1;
  return 0;
}

#define C10_CUDA_CHECK(call) (void)(call)

namespace c10::cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
};
}  // namespace c10::cuda

// Runs `kernel` over `blocks` blocks of `threads` threads, its arguments converted to its
// parameters' types as a launch converts them.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), int64_t blocks, int threads, int64_t shared_bytes, Args... args) {
  using namespace cuda_on_cpu;
  if (threads <= 0 || threads > 1024 || threads % 32 != 0) throw std::runtime_error("bad block size");
  if (shared_bytes > kSharedPerBlock) throw std::runtime_error("more shared memory than a block may have");
  if (blocks <= 0 || blocks >= (int64_t{1} << 31)) throw std::runtime_error("bad grid size");
  std::tuple<Params...> parameters(args...);
  Block b;
  b.fibers.resize(threads);
  b.warp_arrived.resize((threads + 31) / 32);
  b.exchange.resize(threads);
  b.body = [&] { std::apply(kernel, parameters); };
  gridDim.x = static_cast<unsigned>(blocks);
  blockDim.x = static_cast<unsigned>(threads);
  struct Running {
    explicit Running(Block* b) { running = b; }
    ~Running() { running = nullptr; }
  } scope(&b);
  for (int64_t block = 0; block < blocks; ++block) {
    std::memset(shared, 0xFF, sizeof shared);
    run_block(b, static_cast<unsigned>(block));
    const unsigned char* past = shared + shared_bytes;
    const unsigned char* end = shared + sizeof shared;
    if (std::any_of(past, end, [](unsigned char byte) { return byte != 0xFF; })) {
      throw std::runtime_error("block " + std::to_string(block) + " wrote shared memory past the " +
                               std::to_string(shared_bytes) + " bytes its launch asked for");
    }
  }
}
