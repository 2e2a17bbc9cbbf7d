// membench's CUDA kernels and their host code (division_cuda.cu, unchanged) run on the CPU by
// cuda_on_cpu.h, bound with the argument conventions of the extension's own bindings
// (division_ops.cpp), so that a test calls them as it calls the built kernels, with CPU tensors.

#include <torch/extension.h>

#define MEMBENCH_CUDA_EMULATION
#include "cuda_on_cpu.h"
#include "division_cuda.cu"

namespace {

std::vector<at::Tensor> division_compress(at::Tensor x, int64_t block, int64_t bits, int64_t seed, int64_t offset) {
  return division_compress_cuda(x.contiguous(), block, bits, seed, offset);
}

std::vector<at::Tensor> group_compress(at::Tensor x, int64_t group_size, int64_t bits, int64_t seed,
                                       int64_t offset) {
  return group_compress_cuda(x.contiguous(), group_size, bits, seed, offset);
}

at::Tensor group_decompress(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t group_size, int64_t bits,
                            at::IntArrayRef shape, at::ScalarType dtype) {
  int64_t numel = 1;
  for (const int64_t size : shape) numel *= size;
  return group_decompress_cuda(packed, minimum, scale, group_size, bits, numel, dtype).view(shape);
}

std::vector<at::Tensor> relu_pack(at::Tensor x) { return relu_pack_cuda(x.contiguous()); }

std::vector<at::Tensor> dropout_pack(at::Tensor x, double p, int64_t seed, int64_t offset) {
  return dropout_pack_cuda(x.contiguous(), p, seed, offset);
}

at::Tensor masked_grad(at::Tensor grad_out, at::Tensor packed, double gain) {
  return masked_grad_cuda(grad_out.contiguous(), packed, gain);
}

std::vector<at::Tensor> maxpool2d_forward(at::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  return maxpool2d_forward_cuda(x.contiguous(), kernel, stride, padding);
}

at::Tensor maxpool2d_backward(at::Tensor grad_out, at::Tensor index, int64_t height, int64_t width, int64_t kernel,
                              int64_t stride, int64_t padding) {
  return maxpool2d_backward_cuda(grad_out.contiguous(), index, height, width, kernel, stride, padding);
}

// -- the emulation's own semantics, which the tests check ------------------------------------------

// Per thread of a 64-thread block: its value xor-shuffled with lane ^ 5, and the ballot of odd lanes
// below 20 plus lane 31.
__global__ void collectives_kernel(int64_t* shuffled, float* shifted, uint32_t* ballot) {
  shuffled[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, int64_t{1000} * threadIdx.x, 5);
  shifted[threadIdx.x] = __shfl_down_sync(0xFFFFFFFFu, 1000.0f * threadIdx.x, 3);
  const unsigned lane = threadIdx.x % 32;
  ballot[threadIdx.x] = __ballot_sync(0xFFFFFFFFu, (lane % 2 == 1 && lane < 20) || lane == 31);
}

std::vector<at::Tensor> collectives() {
  auto shuffled = at::empty({64}, at::kLong);
  auto shifted = at::empty({64}, at::kFloat);
  auto ballot = at::empty({64}, at::kInt);
  launch_kernel(collectives_kernel, 1, 64, 0, shuffled.data_ptr<int64_t>(), shifted.data_ptr<float>(),
                reinterpret_cast<uint32_t*>(ballot.data_ptr<int32_t>()));
  return {shuffled, shifted, ballot};
}

// Lane 0 alone waits for its warp: a deadlock on a GPU.
__global__ void divergent_kernel() {
  if (threadIdx.x % 32 == 0) __syncwarp();
}

void divergent() { launch_kernel(divergent_kernel, 1, 32, 0); }

// Writes one byte past the 128 shared bytes its launch asks for.
__global__ void past_shared_kernel() {
  extern __shared__ __align__(16) unsigned char shared[];
  if (threadIdx.x == 0) shared[128] = 0;
}

void past_shared() { launch_kernel(past_shared_kernel, 1, 32, 128); }

// What shared memory holds before a block writes it.
__global__ void unwritten_shared_kernel(float* out) {
  extern __shared__ __align__(16) unsigned char shared[];
  out[threadIdx.x] = reinterpret_cast<const float*>(shared)[threadIdx.x];
}

at::Tensor unwritten_shared() {
  auto out = at::empty({32}, at::kFloat);
  launch_kernel(unwritten_shared_kernel, 1, 32, 128, out.data_ptr<float>());
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("division_compress", &division_compress);
  m.def("division_decompress", &division_decompress_cuda);
  m.def("group_compress", &group_compress);
  m.def("group_decompress", &group_decompress);
  m.def("relu_pack", &relu_pack);
  m.def("dropout_pack", &dropout_pack);
  m.def("masked_grad", &masked_grad);
  m.def("maxpool2d_forward", &maxpool2d_forward);
  m.def("maxpool2d_backward", &maxpool2d_backward);
  m.def("collectives", &collectives);
  m.def("divergent", &divergent);
  m.def("unwritten_shared", &unwritten_shared);
  m.def("past_shared", &past_shared);
}
