// CUDA kernels of the activation compressors; same layouts and arithmetic as division_ops.cpp.
// Built only when torch has CUDA and nvcc is present. Multiplications and additions use the
// _rn intrinsics so that nvcc does not contract them into FMAs, which would change the rounding.
// Only ATen's tensor and per-operator headers and c10/cuda's stream, guard and exception headers
// are used: ATen/cuda/CUDAContext.h pulls in cuBLAS/cuSPARSE headers that a bare CUDA toolkit
// lacks, and torch/extension.h (Python bindings, in division_ops.cpp) would only slow nvcc down.
// Every launch runs on the inputs' device (a device guard) and its current stream.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

namespace {

constexpr int kThreads = 256;

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

__global__ void quantize_pack_kernel(const float* x, const float* minimum, const float* scale, const float* noise,
                                     uint8_t* out, int64_t rows, int64_t length, int64_t row_bytes, int bits) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= rows * row_bytes) return;
  const int64_t g = b / row_bytes, byte_in_row = b % row_bytes;
  const int per_byte = 8 / bits;
  const float levels = static_cast<float>((1 << bits) - 1);
  uint8_t byte = 0;
  for (int k = 0; k < per_byte; ++k) {
    const int64_t j = byte_in_row * per_byte + k;
    if (j >= length) break;
    float level = floorf(__fadd_rn(__fdiv_rn(__fsub_rn(x[g * length + j], minimum[g]), scale[g]), noise[g * length + j]));
    level = fminf(fmaxf(level, 0.0f), levels);
    byte |= static_cast<uint8_t>(static_cast<int>(level) << (k * bits));
  }
  out[b] = byte;
}

__global__ void unpack_dequantize_kernel(const uint8_t* packed, const float* minimum, const float* scale, float* x,
                                         int64_t rows, int64_t length, int64_t row_bytes, int bits) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * length) return;
  const int64_t g = i / length, j = i % length;
  const int per_byte = 8 / bits;
  const int level = (packed[g * row_bytes + j / per_byte] >> ((j % per_byte) * bits)) & ((1 << bits) - 1);
  x[i] = __fadd_rn(__fmul_rn(static_cast<float>(level), scale[g]), minimum[g]);
}

__global__ void pack_mask_kernel(const bool* mask, uint8_t* out, int64_t numel, int64_t bytes) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= bytes) return;
  uint8_t byte = 0;
  for (int bit = 0; bit < 8 && b * 8 + bit < numel; ++bit) byte |= static_cast<uint8_t>(mask[b * 8 + bit]) << bit;
  out[b] = byte;
}

__global__ void unpack_mask_kernel(const uint8_t* packed, bool* mask, int64_t numel) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= numel) return;
  mask[j] = (packed[j / 8] >> (j % 8)) & 1;
}

__global__ void maxpool_forward_kernel(const float* x, float* out, int8_t* index, int64_t planes, int64_t height,
                                       int64_t width, int64_t out_h, int64_t out_w, int kernel, int stride, int padding) {
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= planes * out_h * out_w) return;
  const int64_t p = o / (out_h * out_w), oh = (o / out_w) % out_h, ow = o % out_w;
  const float* plane = x + p * height * width;
  float best = -INFINITY;
  int best_index = -1;
  for (int kh = 0; kh < kernel; ++kh) {
    const int64_t ih = oh * stride - padding + kh;
    if (ih < 0 || ih >= height) continue;
    for (int kw = 0; kw < kernel; ++kw) {
      const int64_t iw = ow * stride - padding + kw;
      if (iw < 0 || iw >= width) continue;
      const float value = plane[ih * width + iw];
      if (best_index < 0 || value > best || isnan(value)) {
        best = value;
        best_index = kh * kernel + kw;
      }
    }
  }
  out[o] = best;
  index[o] = static_cast<int8_t>(best_index);
}

__global__ void maxpool_backward_kernel(const float* grad_out, const int8_t* index, float* grad_in, int64_t planes,
                                        int64_t height, int64_t width, int64_t out_h, int64_t out_w, int kernel,
                                        int stride, int padding) {
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= planes * out_h * out_w) return;
  const int64_t p = o / (out_h * out_w), oh = (o / out_w) % out_h, ow = o % out_w;
  const int k = index[o];
  const int64_t ih = oh * stride - padding + k / kernel, iw = ow * stride - padding + k % kernel;
  atomicAdd(grad_in + (p * height + ih) * width + iw, grad_out[o]);
}

}  // namespace

at::Tensor quantize_pack_cuda(at::Tensor x, at::Tensor minimum, at::Tensor scale, at::Tensor noise, int64_t bits) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t rows = x.size(0), length = x.size(1), per_byte = 8 / bits;
  const int64_t row_bytes = (length + per_byte - 1) / per_byte;
  auto packed = at::empty({rows, row_bytes}, x.options().dtype(at::kByte));
  const int64_t n = rows * row_bytes;
  if (n == 0) return packed;
  quantize_pack_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
      x.data_ptr<float>(), minimum.data_ptr<float>(), scale.data_ptr<float>(), noise.data_ptr<float>(),
      packed.data_ptr<uint8_t>(), rows, length, row_bytes, static_cast<int>(bits));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return packed;
}

at::Tensor unpack_dequantize_cuda(at::Tensor packed, at::Tensor minimum, at::Tensor scale, int64_t bits, int64_t length) {
  const c10::cuda::CUDAGuard device_guard(packed.device());
  const int64_t rows = packed.size(0), row_bytes = packed.size(1);
  auto x = at::empty({rows, length}, minimum.options());
  const int64_t n = rows * length;
  if (n == 0) return x;
  unpack_dequantize_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
      packed.data_ptr<uint8_t>(), minimum.data_ptr<float>(), scale.data_ptr<float>(), x.data_ptr<float>(), rows,
      length, row_bytes, static_cast<int>(bits));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return x;
}

at::Tensor pack_mask_cuda(at::Tensor mask) {
  const c10::cuda::CUDAGuard device_guard(mask.device());
  const int64_t numel = mask.numel(), bytes = (numel + 7) / 8;
  auto packed = at::empty({bytes}, mask.options().dtype(at::kByte));
  if (bytes == 0) return packed;
  pack_mask_kernel<<<blocks_for(bytes), kThreads, 0, stream()>>>(
      mask.data_ptr<bool>(), packed.data_ptr<uint8_t>(), numel, bytes);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return packed;
}

at::Tensor unpack_mask_cuda(at::Tensor packed, int64_t numel) {
  const c10::cuda::CUDAGuard device_guard(packed.device());
  auto mask = at::empty({numel}, packed.options().dtype(at::kBool));
  if (numel == 0) return mask;
  unpack_mask_kernel<<<blocks_for(numel), kThreads, 0, stream()>>>(
      packed.data_ptr<uint8_t>(), mask.data_ptr<bool>(), numel);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return mask;
}

std::vector<at::Tensor> maxpool2d_forward_cuda(at::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = (height + 2 * padding - kernel) / stride + 1, out_w = (width + 2 * padding - kernel) / stride + 1;
  auto out = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  auto index = at::empty({x.size(0), x.size(1), out_h, out_w}, x.options().dtype(at::kChar));
  const int64_t n = planes * out_h * out_w;
  if (n == 0) return {out, index};
  maxpool_forward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), index.data_ptr<int8_t>(), planes, height, width, out_h, out_w,
      static_cast<int>(kernel), static_cast<int>(stride), static_cast<int>(padding));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, index};
}

at::Tensor maxpool2d_backward_cuda(at::Tensor grad_out, at::Tensor index, int64_t height, int64_t width, int64_t kernel, int64_t stride, int64_t padding) {
  const c10::cuda::CUDAGuard device_guard(grad_out.device());
  const int64_t planes = grad_out.size(0) * grad_out.size(1), out_h = grad_out.size(2), out_w = grad_out.size(3);
  auto grad_in = at::zeros({grad_out.size(0), grad_out.size(1), height, width}, grad_out.options());
  const int64_t n = planes * out_h * out_w;
  if (n == 0) return grad_in;
  maxpool_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
      grad_out.data_ptr<float>(), index.data_ptr<int8_t>(), grad_in.data_ptr<float>(), planes, height, width, out_h,
      out_w, static_cast<int>(kernel), static_cast<int>(stride), static_cast<int>(padding));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad_in;
}
