// CPU kernels of the activation compressors, and the Python bindings of every kernel.
//
// Bit layout shared with the pure-torch reference (membench/division/compress.py): row g holds
// `length` values; with `bits` bits per value, values_per_byte = 8 / bits and value j of a row
// lives in byte j / values_per_byte at bit offset (j % values_per_byte) * bits. Rows are padded
// to whole bytes. Masks use the same layout with bits = 1 over the flattened tensor.
// Stochastic rounding takes its uniform random numbers as an input, so that a kernel and the
// reference agree bit for bit given the same numbers.

#include <torch/extension.h>

#include <cmath>
#include <vector>

#ifdef WITH_CUDA
torch::Tensor quantize_pack_cuda(torch::Tensor x, torch::Tensor minimum, torch::Tensor scale, torch::Tensor noise, int64_t bits);
torch::Tensor unpack_dequantize_cuda(torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale, int64_t bits, int64_t length);
torch::Tensor pack_mask_cuda(torch::Tensor mask);
torch::Tensor unpack_mask_cuda(torch::Tensor packed, int64_t numel);
std::vector<torch::Tensor> maxpool2d_forward_cuda(torch::Tensor x, int64_t kernel, int64_t stride, int64_t padding);
torch::Tensor maxpool2d_backward_cuda(torch::Tensor grad_out, torch::Tensor index, int64_t height, int64_t width, int64_t kernel, int64_t stride, int64_t padding);
#endif

namespace {

void check_bits(int64_t bits) {
  TORCH_CHECK(bits == 1 || bits == 2 || bits == 4 || bits == 8, "bits must be 1, 2, 4 or 8, got ", bits);
}

int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

torch::Tensor quantize_pack_cpu(torch::Tensor x, torch::Tensor minimum, torch::Tensor scale, torch::Tensor noise, int64_t bits) {
  const int64_t rows = x.size(0), length = x.size(1);
  const int64_t per_byte = 8 / bits, row_bytes = (length + per_byte - 1) / per_byte;
  const float levels = static_cast<float>((1 << bits) - 1);
  auto packed = torch::empty({rows, row_bytes}, x.options().dtype(torch::kUInt8));
  const float* xp = x.data_ptr<float>();
  const float* np = noise.data_ptr<float>();
  const float* mp = minimum.data_ptr<float>();
  const float* sp = scale.data_ptr<float>();
  uint8_t* out = packed.data_ptr<uint8_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const float* row = xp + g * length;
      const float* row_noise = np + g * length;
      for (int64_t b = 0; b < row_bytes; ++b) {
        uint8_t byte = 0;
        for (int64_t k = 0; k < per_byte && b * per_byte + k < length; ++k) {
          const int64_t j = b * per_byte + k;
          // Same operations in the same order as the reference: ((x - min) / scale) + u, floor, clamp.
          float level = std::floor((row[j] - mp[g]) / sp[g] + row_noise[j]);
          level = std::min(std::max(level, 0.0f), levels);
          byte |= static_cast<uint8_t>(static_cast<int>(level) << (k * bits));
        }
        out[g * row_bytes + b] = byte;
      }
    }
  });
  return packed;
}

torch::Tensor unpack_dequantize_cpu(torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale, int64_t bits, int64_t length) {
  const int64_t rows = packed.size(0), row_bytes = packed.size(1);
  const int64_t per_byte = 8 / bits;
  const int mask = (1 << bits) - 1;
  auto x = torch::empty({rows, length}, minimum.options());
  const uint8_t* in = packed.data_ptr<uint8_t>();
  const float* mp = minimum.data_ptr<float>();
  const float* sp = scale.data_ptr<float>();
  float* xp = x.data_ptr<float>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (int64_t j = 0; j < length; ++j) {
        const int level = (in[g * row_bytes + j / per_byte] >> ((j % per_byte) * bits)) & mask;
        const float product = static_cast<float>(level) * sp[g];
        xp[g * length + j] = product + mp[g];
      }
    }
  });
  return x;
}

torch::Tensor pack_mask_cpu(torch::Tensor mask) {
  const int64_t numel = mask.numel();
  auto packed = torch::zeros({(numel + 7) / 8}, mask.options().dtype(torch::kUInt8));
  const bool* in = mask.data_ptr<bool>();
  uint8_t* out = packed.data_ptr<uint8_t>();
  at::parallel_for(0, packed.numel(), 1024, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      uint8_t byte = 0;
      for (int64_t bit = 0; bit < 8 && b * 8 + bit < numel; ++bit) {
        byte |= static_cast<uint8_t>(in[b * 8 + bit]) << bit;
      }
      out[b] = byte;
    }
  });
  return packed;
}

torch::Tensor unpack_mask_cpu(torch::Tensor packed, int64_t numel) {
  auto mask = torch::empty({numel}, packed.options().dtype(torch::kBool));
  const uint8_t* in = packed.data_ptr<uint8_t>();
  bool* out = mask.data_ptr<bool>();
  at::parallel_for(0, numel, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      out[j] = (in[j / 8] >> (j % 8)) & 1;
    }
  });
  return mask;
}

std::vector<torch::Tensor> maxpool2d_forward_cpu(torch::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t planes = x.size(0) * x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = pooled_size(height, kernel, stride, padding), out_w = pooled_size(width, kernel, stride, padding);
  auto out = torch::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  auto index = torch::empty({x.size(0), x.size(1), out_h, out_w}, x.options().dtype(torch::kInt8));
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  int8_t* ip = index.data_ptr<int8_t>();
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* plane = xp + p * height * width;
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          float best = -INFINITY;
          int best_index = -1;
          for (int64_t kh = 0; kh < kernel; ++kh) {
            const int64_t ih = oh * stride - padding + kh;
            if (ih < 0 || ih >= height) continue;
            for (int64_t kw = 0; kw < kernel; ++kw) {
              const int64_t iw = ow * stride - padding + kw;
              if (iw < 0 || iw >= width) continue;
              const float value = plane[ih * width + iw];
              // The first maximum in scan order wins and NaN propagates, as in torch's max_pool2d.
              if (best_index < 0 || value > best || std::isnan(value)) {
                best = value;
                best_index = static_cast<int>(kh * kernel + kw);
              }
            }
          }
          const int64_t o = (p * out_h + oh) * out_w + ow;
          op[o] = best;
          ip[o] = static_cast<int8_t>(best_index);
        }
      }
    }
  });
  return {out, index};
}

torch::Tensor maxpool2d_backward_cpu(torch::Tensor grad_out, torch::Tensor index, int64_t height, int64_t width, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t planes = grad_out.size(0) * grad_out.size(1), out_h = grad_out.size(2), out_w = grad_out.size(3);
  auto grad_in = torch::zeros({grad_out.size(0), grad_out.size(1), height, width}, grad_out.options());
  const float* gp = grad_out.data_ptr<float>();
  const int8_t* ip = index.data_ptr<int8_t>();
  float* dp = grad_in.data_ptr<float>();
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t o = 0; o < out_h * out_w; ++o) {
        const int64_t oh = o / out_w, ow = o % out_w, k = ip[p * out_h * out_w + o];
        const int64_t ih = oh * stride - padding + k / kernel, iw = ow * stride - padding + k % kernel;
        dp[(p * height + ih) * width + iw] += gp[p * out_h * out_w + o];
      }
    }
  });
  return grad_in;
}

}  // namespace

torch::Tensor quantize_pack(torch::Tensor x, torch::Tensor minimum, torch::Tensor scale, torch::Tensor noise, int64_t bits) {
  check_bits(bits);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "x must be a 2-D float32 tensor (rows, length)");
  TORCH_CHECK(noise.sizes() == x.sizes() && noise.scalar_type() == torch::kFloat, "noise must match x");
  TORCH_CHECK(minimum.numel() == x.size(0) && scale.numel() == x.size(0), "minimum and scale need one value per row");
  x = x.contiguous(); noise = noise.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return quantize_pack_cuda(x, minimum, scale, noise, bits);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  return quantize_pack_cpu(x, minimum, scale, noise, bits);
}

torch::Tensor unpack_dequantize(torch::Tensor packed, torch::Tensor minimum, torch::Tensor scale, int64_t bits, int64_t length) {
  check_bits(bits);
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8, "packed must be a 2-D uint8 tensor");
  TORCH_CHECK(packed.size(1) == (length + 8 / bits - 1) / (8 / bits), "packed row size does not match length");
  packed = packed.contiguous(); minimum = minimum.contiguous(); scale = scale.contiguous();
#ifdef WITH_CUDA
  if (packed.is_cuda()) return unpack_dequantize_cuda(packed, minimum, scale, bits, length);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  return unpack_dequantize_cpu(packed, minimum, scale, bits, length);
}

torch::Tensor pack_mask(torch::Tensor mask) {
  TORCH_CHECK(mask.scalar_type() == torch::kBool, "mask must be bool");
  mask = mask.contiguous().view({-1});
#ifdef WITH_CUDA
  if (mask.is_cuda()) return pack_mask_cuda(mask);
#endif
  TORCH_CHECK(mask.is_cpu(), "this build has no CUDA kernels");
  return pack_mask_cpu(mask);
}

torch::Tensor unpack_mask(torch::Tensor packed, int64_t numel) {
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.numel() == (numel + 7) / 8, "packed mask size does not match numel");
  packed = packed.contiguous().view({-1});
#ifdef WITH_CUDA
  if (packed.is_cuda()) return unpack_mask_cuda(packed, numel);
#endif
  TORCH_CHECK(packed.is_cpu(), "this build has no CUDA kernels");
  return unpack_mask_cpu(packed, numel);
}

std::vector<torch::Tensor> maxpool2d_forward(torch::Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
  TORCH_CHECK(x.dim() == 4 && x.scalar_type() == torch::kFloat, "x must be a 4-D float32 tensor");
  TORCH_CHECK(kernel * kernel <= 127, "window too large for an int8 index");
  TORCH_CHECK(padding * 2 <= kernel, "padding must be at most half the kernel");
  x = x.contiguous();
#ifdef WITH_CUDA
  if (x.is_cuda()) return maxpool2d_forward_cuda(x, kernel, stride, padding);
#endif
  TORCH_CHECK(x.is_cpu(), "this build has no CUDA kernels");
  return maxpool2d_forward_cpu(x, kernel, stride, padding);
}

torch::Tensor maxpool2d_backward(torch::Tensor grad_out, torch::Tensor index, int64_t height, int64_t width, int64_t kernel, int64_t stride, int64_t padding) {
  TORCH_CHECK(grad_out.sizes() == index.sizes() && index.scalar_type() == torch::kInt8, "index must match grad_out");
  grad_out = grad_out.contiguous(); index = index.contiguous();
#ifdef WITH_CUDA
  if (grad_out.is_cuda()) return maxpool2d_backward_cuda(grad_out, index, height, width, kernel, stride, padding);
#endif
  TORCH_CHECK(grad_out.is_cpu(), "this build has no CUDA kernels");
  return maxpool2d_backward_cpu(grad_out, index, height, width, kernel, stride, padding);
}

bool has_cuda_kernels() {
#ifdef WITH_CUDA
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "membench DIVISION kernels: bit packing with stochastic rounding, 1-bit masks, max-pool window indices";
  m.def("quantize_pack", &quantize_pack, "quantise rows to `bits` bits with given noise and pack them");
  m.def("unpack_dequantize", &unpack_dequantize, "unpack and dequantise rows");
  m.def("pack_mask", &pack_mask, "pack a bool tensor into bits");
  m.def("unpack_mask", &unpack_mask, "unpack bits into a flat bool tensor");
  m.def("maxpool2d_forward", &maxpool2d_forward, "max pool returning int8 window indices");
  m.def("maxpool2d_backward", &maxpool2d_backward, "max pool gradient from int8 window indices");
  m.def("has_cuda_kernels", &has_cuda_kernels, "whether this build holds CUDA kernels");
}
