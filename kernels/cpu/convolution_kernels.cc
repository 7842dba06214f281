// Reference CPU kernels of 2-D and 3-D convolution: convolution and
// convolution_backward (a 2-D convolution runs as a 3-D one of depth 1).
//
// Per image and group the input is unfolded (im2col) into a double matrix
// col[K = C/groups * kD * kH * kW][P = oD * oH * oW]; then
//   forward:         out[oc, :]  = sum_r weight[oc, r] * col[r, :]
//   grad_input:      gcol[r, :]  = sum_oc weight[oc, r] * grad[oc, :], folded
//                                  back (col2im) into a double plane
//   grad_weight:     gw[oc, r]  += dot(grad[oc, :], col[r, :])
//   grad_bias:       gb[oc]     += sum(grad[oc, :])
// Every inner loop runs over contiguous memory, and everything accumulates
// in double and rounds once. Outputs of shape [0] (masked off by
// output_mask) are skipped. bfloat16 and float16 run these kernels on
// float32 copies (half_kernels.h's WithHalf), so they too accumulate in
// double and round once to float32, then to 16 bits.
#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/cnn_rules.h"
#include "kernels/cpu/channels_first.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// The convolution as a 3-D one: a 2-D convolution is one of depth 1 with a
// kernel of depth 1 (stride 1, no padding, no dilation in depth).
struct Conv3d {
  int64_t n = 0, c = 0, o = 0, groups = 1;
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};
  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
};

Conv3d As3d(const ConvGeometry& g) {
  Conv3d v;
  v.n = g.n;
  v.c = g.c;
  v.o = g.o;
  v.groups = g.params.groups;
  const int shift = 3 - g.spatial;
  for (int d = 0; d < g.spatial; ++d) {
    v.in[shift + d] = g.in[d];
    v.k[shift + d] = g.k[d];
    v.out[shift + d] = g.out[d];
    v.stride[shift + d] = g.params.stride[d];
    v.padding[shift + d] = g.params.padding[d];
    v.dilation[shift + d] = g.params.dilation[d];
  }
  return v;
}

struct GroupDims {
  int64_t cg = 0;  // input channels per group
  int64_t og = 0;  // output channels per group
  int64_t k = 0;   // cg * kd * kh * kw
  int64_t p = 0;   // od * oh * ow
};

GroupDims DimsOf(const Conv3d& g) {
  GroupDims d;
  d.cg = g.c / g.groups;
  d.og = g.o / g.groups;
  d.k = d.cg * g.k[0] * g.k[1] * g.k[2];
  d.p = g.out_plane();
  return d;
}

// Input position along spatial dim `d` of output position `o` and tap `t`.
inline int64_t InputPos(const Conv3d& g, int d, int64_t o, int64_t t) {
  return o * g.stride[d] - g.padding[d] + t * g.dilation[d];
}

// col[((ci * kd + a) * kh + i) * kw + j][(z * oh + y) * ow + x] = volume ci at
// (InputPos(z, a), InputPos(y, i), InputPos(x, j)), 0 in the padding. `x`
// points at the group's first input channel.
template <typename T>
void Im2Col(const T* x, const Conv3d& g, const GroupDims& d, double* col) {
  for (int64_t ci = 0; ci < d.cg; ++ci) {
    const T* volume = x + ci * g.in_plane();
    for (int64_t a = 0; a < g.k[0]; ++a) {
      for (int64_t i = 0; i < g.k[1]; ++i) {
        for (int64_t j = 0; j < g.k[2]; ++j) {
          double* row = col + (((ci * g.k[0] + a) * g.k[1] + i) * g.k[2] + j) * d.p;
          for (int64_t z = 0; z < g.out[0]; ++z) {
            const int64_t iz = InputPos(g, 0, z, a);
            for (int64_t y = 0; y < g.out[1]; ++y) {
              const int64_t iy = InputPos(g, 1, y, i);
              double* out = row + (z * g.out[1] + y) * g.out[2];
              if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1]) {
                std::fill(out, out + g.out[2], 0.0);
                continue;
              }
              const T* in_row = volume + (iz * g.in[1] + iy) * g.in[2];
              for (int64_t xo = 0; xo < g.out[2]; ++xo) {
                const int64_t ix = InputPos(g, 2, xo, j);
                out[xo] = (ix >= 0 && ix < g.in[2]) ? static_cast<double>(in_row[ix]) : 0.0;
              }
            }
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds col into the group's double volumes.
void Col2Im(const double* col, const Conv3d& g, const GroupDims& d, double* x) {
  for (int64_t ci = 0; ci < d.cg; ++ci) {
    double* volume = x + ci * g.in_plane();
    for (int64_t a = 0; a < g.k[0]; ++a) {
      for (int64_t i = 0; i < g.k[1]; ++i) {
        for (int64_t j = 0; j < g.k[2]; ++j) {
          const double* row = col + (((ci * g.k[0] + a) * g.k[1] + i) * g.k[2] + j) * d.p;
          for (int64_t z = 0; z < g.out[0]; ++z) {
            const int64_t iz = InputPos(g, 0, z, a);
            if (iz < 0 || iz >= g.in[0]) continue;
            for (int64_t y = 0; y < g.out[1]; ++y) {
              const int64_t iy = InputPos(g, 1, y, i);
              if (iy < 0 || iy >= g.in[1]) continue;
              double* in_row = volume + (iz * g.in[1] + iy) * g.in[2];
              const double* src = row + (z * g.out[1] + y) * g.out[2];
              for (int64_t xo = 0; xo < g.out[2]; ++xo) {
                const int64_t ix = InputPos(g, 2, xo, j);
                if (ix >= 0 && ix < g.in[2]) in_row[ix] += src[xo];
              }
            }
          }
        }
      }
    }
  }
}

absl::StatusOr<Conv3d> GeometryOf(const KernelArgs& args, const TensorArg& input, const TensorArg& weight) {
  ASSIGN_OR_RETURN(ConvGeometry g, ParseConvGeometry(args.node->attrs, input.type.shape, weight.type.shape));
  return As3d(g);
}

template <typename T>
void ConvForward(const Conv3d& g, const T* x, const T* w, const T* bias, T* y) {
  const GroupDims d = DimsOf(g);
  std::vector<double> col(static_cast<size_t>(d.k * d.p));
  std::vector<double> acc(static_cast<size_t>(d.p));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Im2Col(x + (n * g.c + grp * d.cg) * g.in_plane(), g, d, col.data());
      for (int64_t oc = grp * d.og; oc < (grp + 1) * d.og; ++oc) {
        std::fill(acc.begin(), acc.end(), bias != nullptr ? static_cast<double>(bias[oc]) : 0.0);
        const T* w_row = w + oc * d.k;
        for (int64_t r = 0; r < d.k; ++r) {
          const double a = static_cast<double>(w_row[r]);
          const double* c_row = col.data() + r * d.p;
          for (int64_t q = 0; q < d.p; ++q) acc[q] += a * c_row[q];
        }
        T* out = y + (n * g.o + oc) * d.p;
        for (int64_t q = 0; q < d.p; ++q) out[q] = static_cast<T>(acc[q]);
      }
    }
  }
}

absl::Status ConvolutionKernel(const KernelArgs& args) {
  const TensorArg& input = args.inputs[0];
  const TensorArg& weight = args.inputs[1];
  const TensorArg* bias = args.inputs.size() > 2 ? &args.inputs[2] : nullptr;
  ASSIGN_OR_RETURN(Conv3d g, GeometryOf(args, input, weight));
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    ConvForward<T>(g, input.as<const T>(), weight.as<const T>(), bias != nullptr ? bias->as<const T>() : nullptr,
                   args.outputs[0].as<T>());
    return absl::OkStatus();
  });
}

// Outputs with a null pointer are not computed.
template <typename T>
void ConvBackward(const Conv3d& g, const T* grad, const T* x, const T* w, T* grad_input, T* grad_weight, T* grad_bias) {
  const GroupDims d = DimsOf(g);
  const int64_t plane = g.in_plane();
  std::vector<double> col(static_cast<size_t>(d.k * d.p));
  std::vector<double> gx;
  if (grad_input != nullptr) gx.resize(static_cast<size_t>(d.cg * plane));
  std::vector<double> gw;
  if (grad_weight != nullptr) gw.assign(static_cast<size_t>(g.o * d.k), 0.0);
  std::vector<double> gb;
  if (grad_bias != nullptr) gb.assign(static_cast<size_t>(g.o), 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const int64_t first_oc = grp * d.og;
      if (grad_weight != nullptr) {
        Im2Col(x + (n * g.c + grp * d.cg) * plane, g, d, col.data());
        for (int64_t oc = first_oc; oc < first_oc + d.og; ++oc) {
          const T* dy = grad + (n * g.o + oc) * d.p;
          for (int64_t r = 0; r < d.k; ++r) {
            const double* c_row = col.data() + r * d.p;
            double dot = 0.0;
            for (int64_t q = 0; q < d.p; ++q) dot += static_cast<double>(dy[q]) * c_row[q];
            gw[oc * d.k + r] += dot;
          }
        }
      }
      if (grad_bias != nullptr) {
        for (int64_t oc = first_oc; oc < first_oc + d.og; ++oc) {
          const T* dy = grad + (n * g.o + oc) * d.p;
          double sum = 0.0;
          for (int64_t q = 0; q < d.p; ++q) sum += static_cast<double>(dy[q]);
          gb[oc] += sum;
        }
      }
      if (grad_input != nullptr) {
        std::fill(col.begin(), col.end(), 0.0);  // now gcol
        for (int64_t oc = first_oc; oc < first_oc + d.og; ++oc) {
          const T* dy = grad + (n * g.o + oc) * d.p;
          const T* w_row = w + oc * d.k;
          for (int64_t r = 0; r < d.k; ++r) {
            const double a = static_cast<double>(w_row[r]);
            double* c_row = col.data() + r * d.p;
            for (int64_t q = 0; q < d.p; ++q) c_row[q] += a * static_cast<double>(dy[q]);
          }
        }
        std::fill(gx.begin(), gx.end(), 0.0);
        Col2Im(col.data(), g, d, gx.data());
        T* out = grad_input + (n * g.c + grp * d.cg) * plane;
        for (int64_t i = 0; i < d.cg * plane; ++i) out[i] = static_cast<T>(gx[i]);
      }
    }
  }
  if (grad_weight != nullptr) {
    for (size_t i = 0; i < gw.size(); ++i) grad_weight[i] = static_cast<T>(gw[i]);
  }
  if (grad_bias != nullptr) {
    for (size_t i = 0; i < gb.size(); ++i) grad_bias[i] = static_cast<T>(gb[i]);
  }
}

// Inputs: grad_output, input, weight. Outputs: grad_input, grad_weight,
// grad_bias, each of 0 elements when masked off.
absl::Status ConvolutionBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& input = args.inputs[1];
  const TensorArg& weight = args.inputs[2];
  ASSIGN_OR_RETURN(Conv3d g, GeometryOf(args, input, weight));
  return DispatchFloat(args, input.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto out = [&](int i) { return args.outputs[i].numel() > 0 ? args.outputs[i].as<T>() : nullptr; };
    ConvBackward<T>(g, grad.as<const T>(), input.as<const T>(), weight.as<const T>(), out(0), out(1), out(2));
    return absl::OkStatus();
  });
}

// A channels-last node through channels-first copies, except a 1x1
// weight given channels-first (input `w` of activation input `x`), which is
// read as it is, as is then the gradient of it (output 1 of the backward).
template <CpuKernelFn kKernel, size_t x, size_t w>
absl::Status AnyLayout(const KernelArgs& args) {
  ASSIGN_OR_RETURN(bool channels_last, args.node->attrs.GetBool("channels_last", false));
  ASSIGN_OR_RETURN(int64_t groups, args.node->attrs.GetInt("groups", 1));
  std::vector<bool> keep_inputs(args.inputs.size()), keep_outputs(args.outputs.size());
  if (channels_last && IsChannelsFirst1x1(args.inputs[w].type.shape, args.inputs[x].type.shape, groups)) {
    keep_inputs[w] = true;
    if (w == 2) keep_outputs[1] = true;
  }
  return RunChannelsFirst(args, WithHalf<kKernel>, keep_inputs, keep_outputs);
}

}  // namespace

void AddConvolutionKernels(CpuKernelTable& table) {
  table["convolution"] = AnyLayout<ConvolutionKernel, 0, 1>;
  table["convolution_backward"] = AnyLayout<ConvolutionBackwardKernel, 1, 2>;
}

}  // namespace tandem::cpu
