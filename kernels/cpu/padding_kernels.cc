// Reference CPU kernels of padding (geometry in ir/ops/spatial_rules.h):
//   - constant_pad_nd: every output element is the input element it lands
//     on (output index - before, per dim) or `value` converted to self's
//     dtype (a number attribute that is an int converts exactly); any dtype,
//     values copied as they are;
//   - reflection_pad1d/2d/3d and replication_pad1d/2d/3d: source positions
//     from ir/ops/spatial_index.h (the CUDA kernels' maps); their backward
//     ops scatter each output gradient onto its source in a double volume
//     and round once. bfloat16 and float16 through half_kernels.h's
//     WithHalf (a copy is exact; the backward's sums run in double).
#include <algorithm>
#include <variant>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "ir/ops/spatial_index.h"
#include "ir/ops/spatial_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// constant_pad_nd's `value` as T: an int attribute exactly, a float one
// as a C++ conversion (saturating for integers; the registry refused values
// that do not fit).
template <typename T>
T PadValue(const Attrs& attrs) {
  auto it = attrs.values().find("value");
  if (it == attrs.values().end()) return ConvertAny<T>(int64_t{0});
  if (const auto* i = std::get_if<int64_t>(&it->second)) return ConvertAny<T>(*i);
  if (const auto* b = std::get_if<bool>(&it->second)) return ConvertAny<T>(*b);
  if (const auto* f = std::get_if<double>(&it->second)) return ConvertAny<T>(*f);
  return ConvertAny<T>(int64_t{0});
}

absl::Status ConstantPadKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(ConstantPadGeometry g, ParseConstantPad(args.node->attrs, self.type.shape));
  return DispatchStorableOrHalf(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T value = PadValue<T>(args.node->attrs);
    const T* x = self.as<const T>();
    T* y = out.as<T>();
    const Shape& in_shape = self.type.shape;
    const int rank = static_cast<int>(in_shape.size());
    const int64_t total = out.numel();
    if (total == 0) return absl::OkStatus();
    if (rank == 0) {
      y[0] = x[0];
      return absl::OkStatus();
    }
    const std::vector<int64_t> in_strides = ContiguousStrides(in_shape);
    const int64_t width = g.out[rank - 1];
    std::vector<int64_t> index(static_cast<size_t>(rank), 0);  // of the output row's first element
    for (int64_t start = 0; start < total; start += width) {
      // The input row this output row reads, if every outer dim lands inside.
      bool inside = true;
      int64_t base = 0;
      for (int d = 0; d + 1 < rank; ++d) {
        const int64_t i = index[d] - g.before[d];
        inside = inside && i >= 0 && i < in_shape[d];
        base += i * in_strides[d];
      }
      for (int64_t o = 0; o < width; ++o) {
        const int64_t i = o - g.before[rank - 1];
        y[start + o] = inside && i >= 0 && i < in_shape[rank - 1] ? x[base + i] : value;
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++index[d] < g.out[d]) break;
        index[d] = 0;
      }
    }
    return absl::OkStatus();
  });
}

template <PadMode kMode>
int64_t Source(int64_t o, int64_t before, int64_t in) {
  return kMode == PadMode::kReflect ? spatial::ReflectSource(o, before, in) : spatial::ReplicateSource(o, before, in);
}

template <PadMode kMode, int kDims>
absl::Status PadKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(PadGeometry g, ParsePad(args.node->attrs, self.type.shape, kDims, kMode));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = self.as<const T>();
    T* y = args.outputs[0].as<T>();
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* volume = x + p * g.in_volume();
      T* out = y + p * g.out_volume();
      for (int64_t oz = 0; oz < g.out[0]; ++oz) {
        const int64_t iz = Source<kMode>(oz, g.before[0], g.in[0]);
        for (int64_t oy = 0; oy < g.out[1]; ++oy) {
          const T* row = volume + (iz * g.in[1] + Source<kMode>(oy, g.before[1], g.in[1])) * g.in[2];
          for (int64_t ox = 0; ox < g.out[2]; ++ox) *out++ = row[Source<kMode>(ox, g.before[2], g.in[2])];
        }
      }
    }
    return absl::OkStatus();
  });
}

// Inputs: grad_output, self.
template <PadMode kMode, int kDims>
absl::Status PadBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& self = args.inputs[1];
  ASSIGN_OR_RETURN(PadGeometry g, ParsePad(args.node->attrs, self.type.shape, kDims, kMode));
  return DispatchFloat(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = grad.as<const T>();
    T* dx = args.outputs[0].as<T>();
    std::vector<double> acc(static_cast<size_t>(g.in_volume()));
    for (int64_t p = 0; p < g.planes; ++p) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* in = dy + p * g.out_volume();
      for (int64_t oz = 0; oz < g.out[0]; ++oz) {
        const int64_t iz = Source<kMode>(oz, g.before[0], g.in[0]);
        for (int64_t oy = 0; oy < g.out[1]; ++oy) {
          double* row = acc.data() + (iz * g.in[1] + Source<kMode>(oy, g.before[1], g.in[1])) * g.in[2];
          for (int64_t ox = 0; ox < g.out[2]; ++ox) {
            row[Source<kMode>(ox, g.before[2], g.in[2])] += static_cast<double>(*in++);
          }
        }
      }
      T* out = dx + p * g.in_volume();
      for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<T>(acc[i]);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void AddPaddingKernels(CpuKernelTable& table) {
  constexpr auto kReflect = PadMode::kReflect;
  constexpr auto kReplicate = PadMode::kReplicate;
  table["constant_pad_nd"] = ConstantPadKernel;
  table["reflection_pad1d"] = WithHalf<PadKernel<kReflect, 1>>;
  table["reflection_pad2d"] = WithHalf<PadKernel<kReflect, 2>>;
  table["reflection_pad3d"] = WithHalf<PadKernel<kReflect, 3>>;
  table["replication_pad1d"] = WithHalf<PadKernel<kReplicate, 1>>;
  table["replication_pad2d"] = WithHalf<PadKernel<kReplicate, 2>>;
  table["replication_pad3d"] = WithHalf<PadKernel<kReplicate, 3>>;
  table["reflection_pad1d_backward"] = WithHalf<PadBackwardKernel<kReflect, 1>>;
  table["reflection_pad2d_backward"] = WithHalf<PadBackwardKernel<kReflect, 2>>;
  table["reflection_pad3d_backward"] = WithHalf<PadBackwardKernel<kReflect, 3>>;
  table["replication_pad1d_backward"] = WithHalf<PadBackwardKernel<kReplicate, 1>>;
  table["replication_pad2d_backward"] = WithHalf<PadBackwardKernel<kReplicate, 2>>;
  table["replication_pad3d_backward"] = WithHalf<PadBackwardKernel<kReplicate, 3>>;
}

}  // namespace tandem::cpu
