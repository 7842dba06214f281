// CUDA kernels of the slicing ops: select, slice, their backwards, cat,
// stack, split / split_with_sizes / unbind and the squeezes. Each views its
// tensors as [outer, size, inner] around the sliced dim and moves rows of
// contiguous bytes with cudaMemcpy2DAsync (a strided gather or scatter
// kernel when a slice has a step, or a pitch is past the copy's limits).
// Any dtype: they move bytes.
#include <climits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "ir/ops/slice_rules.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/sequence_launch.h"

namespace tandem::cuda {
namespace {

uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }

constexpr size_t kNarrowRowBytes = 1024;
constexpr int64_t kManyRows = 256;

// `rows` rows of `width` bytes from src (rows `src_pitch` apart) to dst
// (rows `dst_pitch` apart). At least one side is contiguous (pitch ==
// width) for the kernel fallback.
absl::Status Copy2D(const CudaKernelContext& context, const KernelArgs& args, DType dtype, void* dst, size_t dst_pitch,
                    const void* src, size_t src_pitch, size_t width, int64_t rows) {
  if (width == 0 || rows == 0) return absl::OkStatus();
  if (rows == 1 || (dst_pitch == width && src_pitch == width)) {
    return CopyBytes(context, dst, src, width * static_cast<size_t>(rows));
  }
  // Many narrow rows (a channels-last cat or slice along channels: each
  // pixel's run of channels) copy far faster as one kernel over all their
  // units than through cudaMemcpy2DAsync.
  if (width <= kNarrowRowBytes && rows >= kManyRows &&
      LaunchCopyRows(src, src_pitch, dst, dst_pitch, width, rows, context.native)) {
    return Launched(args, cudaGetLastError(), dtype);
  }
  if (dst_pitch <= static_cast<size_t>(INT_MAX) && src_pitch <= static_cast<size_t>(INT_MAX)) {
    CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows),
                                           cudaMemcpyDeviceToDevice, context.native));
    return absl::OkStatus();
  }
  const size_t element = DTypeSize(dtype);
  StridedOperand layout;
  layout.rank = 2;
  layout.sizes[0] = rows;
  layout.sizes[1] = static_cast<int64_t>(width / element);
  layout.strides[1] = 1;
  const int64_t n = rows * layout.sizes[1];
  if (dst_pitch == width) {
    layout.strides[0] = static_cast<int64_t>(src_pitch / element);
    return Launched(args, LaunchGather(static_cast<int>(element), n, src, layout, dst, context.native), dtype);
  }
  layout.strides[0] = static_cast<int64_t>(dst_pitch / element);
  return Launched(args, LaunchStridedScatter(static_cast<int>(element), n, src, layout, dst, context.native), dtype);
}

// The part `range` of `full` (of `full_shape`) and the compact `part`: copied
// from full to part (`to_part`) or back.
absl::Status CopyPart(const CudaKernelContext& context, const KernelArgs& args, const Shape& full_shape, DType dtype,
                      const SliceRange& range, void* full, void* part, bool to_part) {
  const DimSplit split = SplitAtDim(full_shape, range.dim);
  const size_t element = DTypeSize(dtype);
  const size_t run = static_cast<size_t>(split.inner) * element;
  uint8_t* base = Bytes(full) + static_cast<size_t>(range.start) * run;
  if (range.step == 1) {
    const size_t full_pitch = static_cast<size_t>(split.size) * run;
    const size_t part_pitch = static_cast<size_t>(range.length) * run;
    return to_part ? Copy2D(context, args, dtype, part, part_pitch, base, full_pitch, part_pitch, split.outer)
                   : Copy2D(context, args, dtype, base, full_pitch, part, part_pitch, part_pitch, split.outer);
  }
  StridedOperand layout;
  layout.rank = 3;
  layout.sizes[0] = split.outer;
  layout.sizes[1] = range.length;
  layout.sizes[2] = split.inner;
  layout.strides[0] = split.size * split.inner;
  layout.strides[1] = range.step * split.inner;
  layout.strides[2] = 1;
  const int64_t n = split.outer * range.length * split.inner;
  const int bytes = static_cast<int>(element);
  return Launched(args,
                  to_part ? LaunchGather(bytes, n, base, layout, part, context.native)
                          : LaunchStridedScatter(bytes, n, part, layout, base, context.native),
                  dtype);
}

template <bool kSelect>
absl::Status SliceKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, in.type.shape)
                                             : ResolveSlice(args.node->attrs, in.type.shape));
  return CopyPart(context, args, in.type.shape, in.type.dtype, range, in.data, args.outputs[0].data, true);
}

template <bool kSelect>
absl::Status SliceBackwardKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, out.type.shape)
                                             : ResolveSlice(args.node->attrs, out.type.shape));
  if (out.type.bytes() > 0) CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.data, 0, out.type.bytes(), context.native));
  return CopyPart(context, args, out.type.shape, out.type.dtype, range, out.data, args.inputs[0].data, false);
}

absl::Status CatKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  std::vector<Shape> shapes;
  for (const TensorArg& t : args.inputs) shapes.push_back(t.type.shape);
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim", 0));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, out.type.rank()));
  const DimSplit split = SplitAtDim(out.type.shape, dim);
  const size_t run = static_cast<size_t>(split.inner) * DTypeSize(out.type.dtype);
  int64_t offset = 0;
  for (int i : CatParticipants(shapes)) {
    const int64_t size = args.inputs[i].type.shape[dim];
    const size_t width = static_cast<size_t>(size) * run;
    RETURN_IF_ERROR(Copy2D(context, args, out.type.dtype, Bytes(out.data) + static_cast<size_t>(offset) * run,
                           static_cast<size_t>(split.size) * run, args.inputs[i].data, width, width, split.outer));
    offset += size;
  }
  return absl::OkStatus();
}

absl::Status StackKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim", 0));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, out.type.rank()));
  const DimSplit split = SplitAtDim(out.type.shape, dim);
  const size_t run = static_cast<size_t>(split.inner) * DTypeSize(out.type.dtype);
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    RETURN_IF_ERROR(Copy2D(context, args, out.type.dtype, Bytes(out.data) + i * run,
                           static_cast<size_t>(split.size) * run, args.inputs[i].data, run, run, split.outer));
  }
  return absl::OkStatus();
}

template <int kKind>  // 0 split, 1 split_with_sizes, 2 unbind
absl::Status SplitKernel(const CudaKernelContext& context, const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  SplitPieces pieces;
  if constexpr (kKind == 2) {
    ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim", 0));
    ASSIGN_OR_RETURN(pieces.dim, NormalizeDim(dim_attr, in.type.rank()));
    pieces.sizes.assign(static_cast<size_t>(in.type.shape[pieces.dim]), 1);
  } else {
    ASSIGN_OR_RETURN(pieces, ResolveSplit(args.node->attrs, in.type.shape, kKind == 1));
  }
  const DimSplit split = SplitAtDim(in.type.shape, pieces.dim);
  const size_t run = static_cast<size_t>(split.inner) * DTypeSize(in.type.dtype);
  int64_t offset = 0;
  for (size_t p = 0; p < pieces.sizes.size() && p < args.outputs.size(); ++p) {
    const size_t width = static_cast<size_t>(pieces.sizes[p]) * run;
    RETURN_IF_ERROR(Copy2D(context, args, in.type.dtype, args.outputs[p].data, width,
                           Bytes(in.data) + static_cast<size_t>(offset) * run, static_cast<size_t>(split.size) * run,
                           width, split.outer));
    offset += pieces.sizes[p];
  }
  return absl::OkStatus();
}

absl::Status SameBytesKernel(const CudaKernelContext& context, const KernelArgs& args) {
  return CopyBytes(context, args.outputs[0].data, args.inputs[0].data, args.outputs[0].type.bytes());
}

}  // namespace

void AddSlicingKernels(CudaKernelTable& table) {
  table["select.int"] = SliceKernel<true>;
  table["slice.Tensor"] = SliceKernel<false>;
  table["select_backward"] = SliceBackwardKernel<true>;
  table["slice_backward"] = SliceBackwardKernel<false>;
  table["cat"] = CatKernel;
  table["stack"] = StackKernel;
  table["split.Tensor"] = SplitKernel<0>;
  table["split_with_sizes"] = SplitKernel<1>;
  table["unbind.int"] = SplitKernel<2>;
  for (const char* op : {"squeeze.dims", "squeeze"}) {
    table[op] = SameBytesKernel;
  }
}

}  // namespace tandem::cuda
