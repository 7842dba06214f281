// Reference CPU kernels of the slicing ops: select, slice, their backwards,
// cat, stack, split / split_with_sizes / unbind, and the squeezes. Every one
// views its tensors as [outer, size, inner] around the sliced dim and moves
// runs of `inner` elements, so it serves every dtype.
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "ir/ops/slice_rules.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// Copies, for each of `outer` rows, `count` runs of `run` bytes from
// src (run index: src_first + j * src_step within a row of src_row runs) to
// dst (run index: dst_first + j * dst_step within a row of dst_row runs).
struct RunCopy {
  int64_t outer = 1, count = 0;
  size_t run = 0;
  int64_t src_row = 0, src_first = 0, src_step = 1;
  int64_t dst_row = 0, dst_first = 0, dst_step = 1;
};

void CopyRuns(const RunCopy& c, const void* src, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t o = 0; o < c.outer; ++o) {
    for (int64_t j = 0; j < c.count; ++j) {
      const int64_t from = o * c.src_row + c.src_first + j * c.src_step;
      const int64_t to = o * c.dst_row + c.dst_first + j * c.dst_step;
      std::memcpy(d + to * c.run, s + from * c.run, c.run);
    }
  }
}

size_t RunBytes(const DimSplit& split, DType dtype) { return static_cast<size_t>(split.inner) * DTypeSize(dtype); }

// The part of `full` (shape `full_shape`) that `range` names, as a copy
// between it and the compact tensor `part`.
RunCopy PartCopy(const Shape& full_shape, DType dtype, const SliceRange& range, bool to_part) {
  const DimSplit split = SplitAtDim(full_shape, range.dim);
  RunCopy c;
  c.outer = split.outer;
  c.count = range.length;
  c.run = RunBytes(split, dtype);
  if (to_part) {
    c.src_row = split.size, c.src_first = range.start, c.src_step = range.step;
    c.dst_row = range.length;
  } else {
    c.dst_row = split.size, c.dst_first = range.start, c.dst_step = range.step;
    c.src_row = range.length;
  }
  return c;
}

template <bool kSelect>
absl::Status SliceKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, in.type.shape)
                                             : ResolveSlice(args.node->attrs, in.type.shape));
  CopyRuns(PartCopy(in.type.shape, in.type.dtype, range, true), in.data, args.outputs[0].data);
  return absl::OkStatus();
}

template <bool kSelect>
absl::Status SliceBackwardKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(SliceRange range, kSelect ? ResolveSelect(args.node->attrs, out.type.shape)
                                             : ResolveSlice(args.node->attrs, out.type.shape));
  std::memset(out.data, 0, out.type.bytes());
  CopyRuns(PartCopy(out.type.shape, out.type.dtype, range, false), args.inputs[0].data, out.data);
  return absl::OkStatus();
}

absl::Status CatKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  std::vector<Shape> shapes;
  for (const TensorArg& t : args.inputs) shapes.push_back(t.type.shape);
  const std::vector<int> kept = CatParticipants(shapes);
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim", 0));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, out.type.rank()));
  const DimSplit split = SplitAtDim(out.type.shape, dim);
  int64_t offset = 0;
  const size_t element_run = RunBytes(split, out.type.dtype);
  auto* d = static_cast<uint8_t*>(out.data);
  for (int i : kept) {
    const int64_t size = args.inputs[i].type.shape[dim];
    const auto* s = static_cast<const uint8_t*>(args.inputs[i].data);
    for (int64_t o = 0; o < split.outer; ++o) {
      std::memcpy(d + (o * split.size + offset) * element_run, s + o * size * element_run,
                  static_cast<size_t>(size) * element_run);
    }
    offset += size;
  }
  return absl::OkStatus();
}

absl::Status StackKernel(const KernelArgs& args) {
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim", 0));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, out.type.rank()));
  const DimSplit split = SplitAtDim(out.type.shape, dim);
  const size_t run = RunBytes(split, out.type.dtype);
  auto* d = static_cast<uint8_t*>(out.data);
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const auto* s = static_cast<const uint8_t*>(args.inputs[i].data);
    for (int64_t o = 0; o < split.outer; ++o) {
      std::memcpy(d + (o * split.size + static_cast<int64_t>(i)) * run, s + o * run, run);
    }
  }
  return absl::OkStatus();
}

// split.Tensor / split_with_sizes / unbind.int: output p is the p-th run of
// the input along the dim.
template <int kKind>  // 0 split, 1 split_with_sizes, 2 unbind
absl::Status SplitKernel(const KernelArgs& args) {
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
  const size_t element_run = RunBytes(split, in.type.dtype);
  const auto* s = static_cast<const uint8_t*>(in.data);
  int64_t offset = 0;
  for (size_t p = 0; p < pieces.sizes.size() && p < args.outputs.size(); ++p) {
    const int64_t size = pieces.sizes[p];
    auto* d = static_cast<uint8_t*>(args.outputs[p].data);
    for (int64_t o = 0; o < split.outer; ++o) {
      std::memcpy(d + o * size * element_run, s + (o * split.size + offset) * element_run,
                  static_cast<size_t>(size) * element_run);
    }
    offset += size;
  }
  return absl::OkStatus();
}

absl::Status SameBytesKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  if (out.data != in.data) std::memmove(out.data, in.data, out.type.bytes());
  return absl::OkStatus();
}

}  // namespace

void AddSlicingKernels(CpuKernelTable& table) {
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

}  // namespace tandem::cpu
