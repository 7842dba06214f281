// CUDA kernels of the resampling, padding and 3-D pooling ops
// (resample_kernels.cu, padding_kernels.cu, pooling3d_kernels.cu):
// upsample_nearest2d and upsample_bilinear2d in every form and their
// backward ops; constant_pad_nd (any dtype); reflection_pad1d/2d/3d and
// replication_pad1d/2d/3d and their backward ops; avg_pool3d,
// max_pool3d_with_indices, _adaptive_avg_pool3d and their backward ops.
// Geometry from ir/ops/spatial_rules.h, as on the CPU; float ops take
// float32, float64, bfloat16 and float16.
#include <cmath>
#include <cstring>
#include <variant>

#include "base/status_macros.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/spatial_launch.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

bool HasKernelFor(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

// ---- resampling ----

ResampleLaunchParams ResampleParamsOf(const ResampleGeometry& g) {
  ResampleLaunchParams p;
  p.planes = g.planes();
  p.in_h = g.in[0];
  p.in_w = g.in[1];
  p.out_h = g.out[0];
  p.out_w = g.out[1];
  p.scale_h = g.scales[0];
  p.scale_w = g.scales[1];
  p.align_corners = g.align_corners;
  return p;
}

template <ResampleMode kMode, ResampleForm kForm>
absl::Status UpsampleKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  const DType dtype = x.type.dtype;
  if (!HasKernelFor(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(ResampleGeometry g, ParseUpsample(args.node->attrs, x.type.shape, kMode, kForm));
  const ResampleLaunchParams p = ResampleParamsOf(g);
  void* y = args.outputs[0].data;
  return Launched(args,
                  kMode == ResampleMode::kNearest ? LaunchUpsampleNearest2d(dtype, p, x.data, y, context.native)
                                                  : LaunchUpsampleBilinear2d(dtype, p, x.data, y, context.native),
                  dtype);
}

// Input: grad_output. Output: grad_input of input_size.
template <ResampleMode kMode, ResampleForm kForm>
absl::Status UpsampleBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const DType dtype = grad.type.dtype;
  if (!HasKernelFor(dtype)) return UnsupportedDType(args, dtype);
  ASSIGN_OR_RETURN(ResampleGeometry g, ParseUpsampleBackward(args.node->attrs, grad.type.shape, kMode, kForm));
  const ResampleLaunchParams p = ResampleParamsOf(g);
  void* dx = args.outputs[0].data;
  return Launched(args,
                  kMode == ResampleMode::kNearest
                      ? LaunchUpsampleNearest2dBackward(dtype, p, grad.data, dx, context.native)
                      : LaunchUpsampleBilinear2dBackward(dtype, p, grad.data, dx, context.native),
                  dtype);
}

// ---- padding ----

// constant_pad_nd's value as the bytes of one element of `dtype`: an int
// attribute exactly, a float one converted as the CPU kernel converts it
// (integers truncated; the registry refused values that do not fit).
uint64_t PadValueBits(const Attrs& attrs, DType dtype) {
  auto it = attrs.values().find("value");
  double f = 0.0;
  int64_t i = 0;
  bool is_int = true;
  if (it != attrs.values().end()) {
    if (const auto* v = std::get_if<int64_t>(&it->second)) {
      i = *v;
    } else if (const auto* b = std::get_if<bool>(&it->second)) {
      i = *b ? 1 : 0;
    } else if (const auto* d = std::get_if<double>(&it->second)) {
      f = *d;
      is_int = false;
    }
  }
  const double as_double = is_int ? static_cast<double>(i) : f;
  const auto bits = [](auto v) {
    uint64_t out = 0;
    std::memcpy(&out, &v, sizeof(v));
    return out;
  };
  switch (dtype) {
    case DType::kFloat32:
      return bits(static_cast<float>(as_double));
    case DType::kFloat64:
      return bits(as_double);
    case DType::kInt64:
      return bits(is_int ? i : static_cast<int64_t>(std::trunc(f)));
    case DType::kInt32:
      return bits(is_int ? static_cast<int32_t>(i) : static_cast<int32_t>(std::trunc(f)));
    case DType::kBool:
      return bits(static_cast<uint8_t>(as_double != 0.0 ? 1 : 0));
    case DType::kBFloat16:
      return bits(BFloat16(as_double).bits);
    case DType::kFloat16:
      return bits(Float16(as_double).bits);
  }
  return 0;
}

absl::Status ConstantPadKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  ASSIGN_OR_RETURN(ConstantPadGeometry g, ParseConstantPad(args.node->attrs, x.type.shape));
  ConstantPadLaunchParams p;
  p.element_bytes = static_cast<int>(DTypeSize(x.type.dtype));
  p.value = PadValueBits(args.node->attrs, x.type.dtype);
  // Dims merged where the inner one is not padded (its output and input
  // sizes agree), so that any rank fits the kernel's kMaxDims.
  int rank = 0;
  for (size_t d = 0; d < x.type.shape.size(); ++d) {
    const int64_t in = x.type.shape[d], out = g.out[d], before = g.before[d];
    if (rank > 0 && before == 0 && out == in) {
      p.in[rank - 1] *= in;
      p.out[rank - 1] *= in;
      p.before[rank - 1] *= in;
      continue;
    }
    if (rank == kMaxDims) {
      return absl::UnimplementedError(
          absl::StrCat(args.node->op, ": more than ", kMaxDims, " padded dims do not fit the CUDA kernel"));
    }
    p.in[rank] = in;
    p.out[rank] = out;
    p.before[rank] = before;
    ++rank;
  }
  if (rank == 0) {  // a rank-0 tensor: a copy of its one element
    p.in[0] = p.out[0] = 1;
    rank = 1;
  }
  p.rank = rank;
  return Launched(args, LaunchConstantPad(p, x.data, args.outputs[0].data, context.native), x.type.dtype);
}

absl::StatusOr<PadLaunchParams> PadParamsOf(const KernelArgs& args, const Shape& self, int dims, PadMode mode) {
  ASSIGN_OR_RETURN(PadGeometry g, ParsePad(args.node->attrs, self, dims, mode));
  PadLaunchParams p;
  p.planes = g.planes;
  for (int d = 0; d < 3; ++d) {
    p.in[d] = g.in[d];
    p.out[d] = g.out[d];
    p.before[d] = g.before[d];
  }
  p.reflect = mode == PadMode::kReflect;
  return p;
}

template <PadMode kMode, int kDims>
absl::Status PadKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& x = args.inputs[0];
  if (!HasKernelFor(x.type.dtype)) return UnsupportedDType(args, x.type.dtype);
  ASSIGN_OR_RETURN(PadLaunchParams p, PadParamsOf(args, x.type.shape, kDims, kMode));
  return Launched(args, LaunchPad(x.type.dtype, p, x.data, args.outputs[0].data, context.native), x.type.dtype);
}

// Inputs: grad_output, self.
template <PadMode kMode, int kDims>
absl::Status PadBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(PadLaunchParams p, PadParamsOf(args, self.type.shape, kDims, kMode));
  return Launched(args,
                  LaunchPadBackward(self.type.dtype, p, args.inputs[0].data, args.outputs[0].data, context.native),
                  self.type.dtype);
}

// ---- 3-D pooling ----

Pool3dLaunchParams Pool3dParamsOf(const Pool3dGeometry& g) {
  Pool3dLaunchParams p;
  p.planes = g.planes;
  for (int d = 0; d < 3; ++d) {
    p.in[d] = g.in[d];
    p.out[d] = g.out[d];
    p.kernel[d] = g.params.kernel[d];
    p.stride[d] = g.params.stride[d];
    p.padding[d] = g.params.padding[d];
    p.dilation[d] = g.params.dilation[d];
  }
  p.count_include_pad = g.params.count_include_pad;
  p.divisor_override = g.params.divisor_override;
  return p;
}

absl::StatusOr<Pool3dLaunchParams> PoolParamsOf(const KernelArgs& args, const Shape& self, PoolKind kind) {
  ASSIGN_OR_RETURN(Pool3dParams params, ParsePool3dParams(args.node->attrs, kind));
  ASSIGN_OR_RETURN(Pool3dGeometry g, Pool3dShape(params, self));
  return Pool3dParamsOf(g);
}

absl::Status MaxPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dLaunchParams p, PoolParamsOf(args, self.type.shape, PoolKind::kMax));
  return Launched(args,
                  LaunchMaxPool3d(self.type.dtype, p, self.data, args.outputs[0].data, args.outputs[1].as<int64_t>(),
                                  context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self, indices.
absl::Status MaxPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dLaunchParams p, PoolParamsOf(args, self.type.shape, PoolKind::kMax));
  return Launched(args,
                  LaunchMaxPool3dBackward(self.type.dtype, p, args.inputs[0].data, args.inputs[2].as<const int64_t>(),
                                          args.outputs[0].data, context.native),
                  self.type.dtype);
}

absl::Status AvgPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dLaunchParams p, PoolParamsOf(args, self.type.shape, PoolKind::kAvg));
  return Launched(args, LaunchAvgPool3d(self.type.dtype, p, self.data, args.outputs[0].data, context.native),
                  self.type.dtype);
}

// Inputs: grad_output, self.
absl::Status AvgPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dLaunchParams p, PoolParamsOf(args, self.type.shape, PoolKind::kAvg));
  return Launched(
      args, LaunchAvgPool3dBackward(self.type.dtype, p, args.inputs[0].data, args.outputs[0].data, context.native),
      self.type.dtype);
}

absl::Status AdaptiveAvgPoolKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dGeometry g, Adaptive3dShape(self.type.shape, args.outputs[0].type.shape));
  return Launched(
      args,
      LaunchAdaptiveAvgPool3d(self.type.dtype, Pool3dParamsOf(g), self.data, args.outputs[0].data, context.native),
      self.type.dtype);
}

// Inputs: grad_output, self.
absl::Status AdaptiveAvgPoolBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  if (!HasKernelFor(self.type.dtype)) return UnsupportedDType(args, self.type.dtype);
  ASSIGN_OR_RETURN(Pool3dGeometry g, Adaptive3dShape(self.type.shape, grad.type.shape));
  return Launched(args,
                  LaunchAdaptiveAvgPool3dBackward(self.type.dtype, Pool3dParamsOf(g), grad.data, args.outputs[0].data,
                                                  context.native),
                  self.type.dtype);
}

}  // namespace

void AddSpatialKernels(CudaKernelTable& table) {
  constexpr auto kNearest = ResampleMode::kNearest;
  constexpr auto kBilinear = ResampleMode::kBilinear;
  constexpr auto kDefault = ResampleForm::kDefault;
  constexpr auto kVec = ResampleForm::kVec;
  table["upsample_nearest2d"] = UpsampleKernel<kNearest, kDefault>;
  table["upsample_nearest2d.vec"] = UpsampleKernel<kNearest, kVec>;
  table["upsample_bilinear2d"] = UpsampleKernel<kBilinear, kDefault>;
  table["upsample_bilinear2d.vec"] = UpsampleKernel<kBilinear, kVec>;
  table["upsample_nearest2d_backward"] = UpsampleBackwardKernel<kNearest, kDefault>;
  table["upsample_nearest2d_backward.vec"] = UpsampleBackwardKernel<kNearest, kVec>;
  table["upsample_bilinear2d_backward"] = UpsampleBackwardKernel<kBilinear, kDefault>;
  table["upsample_bilinear2d_backward.vec"] = UpsampleBackwardKernel<kBilinear, kVec>;

  constexpr auto kReflect = PadMode::kReflect;
  constexpr auto kReplicate = PadMode::kReplicate;
  table["constant_pad_nd"] = ConstantPadKernel;
  table["reflection_pad1d"] = PadKernel<kReflect, 1>;
  table["reflection_pad2d"] = PadKernel<kReflect, 2>;
  table["reflection_pad3d"] = PadKernel<kReflect, 3>;
  table["replication_pad1d"] = PadKernel<kReplicate, 1>;
  table["replication_pad2d"] = PadKernel<kReplicate, 2>;
  table["replication_pad3d"] = PadKernel<kReplicate, 3>;
  table["reflection_pad1d_backward"] = PadBackwardKernel<kReflect, 1>;
  table["reflection_pad2d_backward"] = PadBackwardKernel<kReflect, 2>;
  table["reflection_pad3d_backward"] = PadBackwardKernel<kReflect, 3>;
  table["replication_pad1d_backward"] = PadBackwardKernel<kReplicate, 1>;
  table["replication_pad2d_backward"] = PadBackwardKernel<kReplicate, 2>;
  table["replication_pad3d_backward"] = PadBackwardKernel<kReplicate, 3>;

  table["max_pool3d_with_indices"] = MaxPoolKernel;
  table["max_pool3d_with_indices_backward"] = MaxPoolBackwardKernel;
  table["avg_pool3d"] = AvgPoolKernel;
  table["avg_pool3d_backward"] = AvgPoolBackwardKernel;
  table["_adaptive_avg_pool3d"] = AdaptiveAvgPoolKernel;
  table["_adaptive_avg_pool3d_backward"] = AdaptiveAvgPoolBackwardKernel;
}

}  // namespace tandem::cuda
