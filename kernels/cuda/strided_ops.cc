// CUDA kernels of the strided ops: slice_scatter, select_scatter,
// as_strided, as_strided_scatter, diagonal, diagonal_scatter, flip and
// repeat. Each resolves
// its view with the registry's rule (index_rules.h, slice_rules.h; the view
// was bounds-checked at registration), collapses it (strided_layout.h) and
// moves bytes: a plain copy where the view is contiguous, the tiled
// transpose where it is one, else the strided gather or scatter of
// copy_kernels.cu / indexing_kernels.cu. Any dtype.
#include <cstdint>

#include "base/status_macros.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/slice_rules.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/sequence_launch.h"
#include "kernels/cuda/strided_layout.h"

namespace tandem::cuda {
namespace {

uint8_t* At(void* p, int64_t elements, DType dtype) {
  return static_cast<uint8_t*>(p) + elements * static_cast<int64_t>(DTypeSize(dtype));
}

// out (contiguous, of view.sizes) = `in` read through `view`.
absl::Status GatherView(const CudaKernelContext& context, const KernelArgs& args, DType dtype, const StridedView& view,
                        const void* in, void* out) {
  const int64_t n = NumElements(view.sizes);
  if (n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(view.sizes, {view.strides}));
  const StridedOperand& layout = layouts[0];
  const void* base = At(const_cast<void*>(in), view.offset, dtype);
  const int element = static_cast<int>(DTypeSize(dtype));
  if (layout.rank == 0) return CopyBytes(context, out, base, static_cast<size_t>(n) * element);
  int64_t batch = 0, rows = 0, cols = 0;
  if (IsBatchedTranspose(layout, &batch, &rows, &cols)) {
    return Launched(args, LaunchTranspose(element, batch, rows, cols, base, out, context.native), dtype);
  }
  return Launched(args, LaunchGather(element, n, base, layout, out, context.native), dtype);
}

// `out` written through `view` = `in` (contiguous, of view.sizes).
absl::Status ScatterView(const CudaKernelContext& context, const KernelArgs& args, DType dtype, const StridedView& view,
                         const void* in, void* out) {
  const int64_t n = NumElements(view.sizes);
  if (n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<StridedOperand> layouts, CollapseLayouts(view.sizes, {view.strides}));
  const StridedOperand& layout = layouts[0];
  void* base = At(out, view.offset, dtype);
  const int element = static_cast<int>(DTypeSize(dtype));
  if (layout.rank == 0) return CopyBytes(context, base, in, static_cast<size_t>(n) * element);
  return Launched(args, LaunchStridedScatter(element, n, in, layout, base, context.native), dtype);
}

template <bool kSelect>
absl::Status SliceScatterKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, self.type.shape)
                                             : ResolveSlice(args.node->attrs, self.type.shape));
  RETURN_IF_ERROR(CopyBytes(context, out.data, self.data, out.type.bytes()));
  return ScatterView(context, args, self.type.dtype, SliceView(range, self.type.shape, kSelect), args.inputs[1].data,
                     out.data);
}

// as_strided_scatter, diagonal_scatter: out = self; out's view = src.
template <absl::StatusOr<StridedView> (*kResolve)(const Attrs&, const Shape&)>
absl::Status ViewScatterKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(StridedView view, kResolve(args.node->attrs, self.type.shape));
  RETURN_IF_ERROR(CopyBytes(context, out.data, self.data, out.type.bytes()));
  return ScatterView(context, args, self.type.dtype, view, args.inputs[1].data, out.data);
}

// as_strided, diagonal, flip: the output is self read through a view.
template <absl::StatusOr<StridedView> (*kResolve)(const Attrs&, const Shape&)>
absl::Status ViewKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(StridedView view, kResolve(args.node->attrs, self.type.shape));
  return GatherView(context, args, self.type.dtype, view, self.data, args.outputs[0].data);
}

absl::Status RepeatKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(RepeatPlan plan, ResolveRepeat(args.node->attrs, self.type.shape));
  return GatherView(context, args, self.type.dtype, plan.view, self.data, args.outputs[0].data);
}

}  // namespace

void AddStridedKernels(CudaKernelTable& table) {
  table["slice_scatter"] = SliceScatterKernel<false>;
  table["select_scatter"] = SliceScatterKernel<true>;
  table["as_strided_scatter"] = ViewScatterKernel<ResolveAsStrided>;
  table["diagonal_scatter"] = ViewScatterKernel<ResolveDiagonal>;
  table["as_strided"] = ViewKernel<ResolveAsStrided>;
  table["diagonal"] = ViewKernel<ResolveDiagonal>;
  table["flip"] = ViewKernel<ResolveFlip>;
  table["repeat"] = RepeatKernel;
}

}  // namespace tandem::cuda
