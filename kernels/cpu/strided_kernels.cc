// Reference CPU kernels of the strided ops: slice_scatter, select_scatter,
// as_strided, as_strided_scatter, diagonal, diagonal_scatter, flip and
// repeat. Each resolves
// its view with the registry's own rule (index_rules.h, slice_rules.h: the
// view was bounds-checked at registration) and moves elements as bytes, so
// it serves every dtype.
#include <cstring>

#include "base/status_macros.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/slice_rules.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/view_copy.h"

namespace tandem::cpu {
namespace {

void CopySelf(const TensorArg& self, const TensorArg& out) {
  if (out.data != self.data) std::memmove(out.data, self.data, out.type.bytes());
}

// out = self; out's part `range` (select: without its dim) = src.
template <bool kSelect>
absl::Status SliceScatterKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, self.type.shape)
                                             : ResolveSlice(args.node->attrs, self.type.shape));
  CopySelf(self, out);
  return ScatterView(args, self.type.dtype, SliceView(range, self.type.shape, kSelect), args.inputs[1].data, out.data);
}

// as_strided_scatter, diagonal_scatter: out = self; out's view = src.
template <absl::StatusOr<StridedView> (*kResolve)(const Attrs&, const Shape&)>
absl::Status ViewScatterKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(StridedView view, kResolve(args.node->attrs, self.type.shape));
  CopySelf(self, out);
  return ScatterView(args, self.type.dtype, view, args.inputs[1].data, out.data);
}

// as_strided, diagonal, flip: the output is self read through a view.
template <absl::StatusOr<StridedView> (*kResolve)(const Attrs&, const Shape&)>
absl::Status ViewKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(StridedView view, kResolve(args.node->attrs, self.type.shape));
  return GatherView(args, self.type.dtype, view, self.data, args.outputs[0].data);
}

absl::Status RepeatKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(RepeatPlan plan, ResolveRepeat(args.node->attrs, self.type.shape));
  return GatherView(args, self.type.dtype, plan.view, self.data, args.outputs[0].data);
}

}  // namespace

void AddStridedKernels(CpuKernelTable& table) {
  table["slice_scatter"] = SliceScatterKernel<false>;
  table["select_scatter"] = SliceScatterKernel<true>;
  table["as_strided_scatter"] = ViewScatterKernel<ResolveAsStrided>;
  table["diagonal_scatter"] = ViewScatterKernel<ResolveDiagonal>;
  table["as_strided"] = ViewKernel<ResolveAsStrided>;
  table["diagonal"] = ViewKernel<ResolveDiagonal>;
  table["flip"] = ViewKernel<ResolveFlip>;
  table["repeat"] = RepeatKernel;
}

}  // namespace tandem::cpu
