// Registry entries of the slicing ops: select, slice and their backwards,
// cat, stack, split / split_with_sizes / unbind (ops with several outputs),
// and squeeze over several dims. They move bytes and accept every dtype.
//
// Ops with a data-dependent number of outputs (split.Tensor,
// split_with_sizes, unbind.int and their _copy / unsafe_ forms) have
// OpDef::num_outputs == kVariableOutputs: the count follows from the
// attributes and the input's shape (split: ceil(size / split_size), at least
// 1; split_with_sizes: one per entry of split_sizes; unbind: the dim's size),
// and a node must name exactly that many outputs.
#include "absl/strings/str_cat.h"
#include "base/checked_math.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"
#include "ir/ops/shape_rules.h"
#include "ir/ops/slice_rules.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::Status WithSelf(const TensorType& self, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("self is ", self.ToString(), ": ", status.message()));
}

absl::StatusOr<TypeList> SelectInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto range = ResolveSelect(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], range.status()));
  TensorType out = in[0];
  out.shape.erase(out.shape.begin() + range->dim);
  return TypeList{out};
}

absl::StatusOr<TypeList> SliceInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  auto range = ResolveSlice(attrs, in[0].shape);
  RETURN_IF_ERROR(WithSelf(in[0], range.status()));
  TensorType out = in[0];
  out.shape[range->dim] = range->length;
  return TypeList{out};
}

// select_backward(grad_output; input_sizes, dim, index) and
// slice_backward(grad_output; input_sizes, dim, start, end, step): zeros of
// input_sizes with grad_output in the selected part.
InferFn SliceBackwardInfer(bool select) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    ASSIGN_OR_RETURN(Shape input, InputSizesAttr(attrs));
    auto range = select ? ResolveSelect(attrs, input) : ResolveSlice(attrs, input);
    if (!range.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input_sizes ", ShapeString(input), ": ", range.status().message()));
    }
    Shape expected = input;
    if (select) {
      expected.erase(expected.begin() + range->dim);
    } else {
      expected[range->dim] = range->length;
    }
    if (in[0].shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat("grad_output is ", in[0].ToString(), "; expected ",
                                                     ShapeString(expected), " for input_sizes ", ShapeString(input)));
    }
    return TypeList{{in[0].dtype, input}};
  };
}

absl::Status SameDType(absl::Span<const TensorType> in) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat("tensors[0] is ", in[0].ToString(), " but tensors[", i, "] is ",
                                                     in[i].ToString(), "; dtypes must match"));
    }
  }
  return absl::OkStatus();
}

// cat(tensors...; dim=0): equal shapes except in dim (1-D empty tensors are
// skipped, as in PyTorch).
absl::StatusOr<TypeList> CatInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(SameDType(in));
  std::vector<Shape> shapes;
  for (const TensorType& t : in) shapes.push_back(t.shape);
  const std::vector<int> kept = CatParticipants(shapes);
  const TensorType& first = in[kept[0]];
  if (first.rank() == 0) return absl::InvalidArgumentError("tensors are rank 0; cat needs rank >= 1");
  ASSIGN_OR_RETURN(int64_t dim_attr, attrs.GetInt("dim", 0));
  auto dim = NormalizeDim(dim_attr, first.rank());
  RETURN_IF_ERROR(WithSelf(first, dim.status()));
  Shape out = first.shape;
  out[*dim] = 0;
  for (int i : kept) {
    Shape a = in[i].shape, b = first.shape;
    if (a.size() == b.size()) a[*dim] = b[*dim] = 0;
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat("tensors[", i, "] is ", in[i].ToString(), " but tensors[", kept[0],
                                                     "] is ", first.ToString(), "; only dim ", *dim, " may differ"));
    }
    std::optional<int64_t> sum = CheckedAdd(out[*dim], in[i].shape[*dim]);
    if (!sum.has_value()) return absl::InvalidArgumentError(absl::StrCat("dim ", *dim, " of the result overflows"));
    out[*dim] = *sum;
  }
  return TypeList{{first.dtype, out}};
}

// stack(tensors...; dim=0): equal shapes; a new dim at `dim`.
absl::StatusOr<TypeList> StackInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(SameDType(in));
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].shape != in[0].shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensors[", i, "] is ", in[i].ToString(), " but tensors[0] is ",
                                                     in[0].ToString(), "; stack needs equal shapes"));
    }
  }
  ASSIGN_OR_RETURN(int64_t dim_attr, attrs.GetInt("dim", 0));
  auto dim = NormalizeDim(dim_attr, in[0].rank() + 1);
  RETURN_IF_ERROR(WithSelf(in[0], dim.status()));
  TensorType out = in[0];
  out.shape.insert(out.shape.begin() + *dim, static_cast<int64_t>(in.size()));
  return TypeList{out};
}

InferFn SplitInfer(bool with_sizes) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    auto pieces = ResolveSplit(attrs, in[0].shape, with_sizes);
    RETURN_IF_ERROR(WithSelf(in[0], pieces.status()));
    TypeList out;
    for (int64_t size : pieces->sizes) {
      TensorType piece = in[0];
      piece.shape[pieces->dim] = size;
      out.push_back(piece);
    }
    return out;
  };
}

absl::StatusOr<TypeList> UnbindInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  if (in[0].rank() == 0) return absl::InvalidArgumentError("self is rank 0; unbind needs rank >= 1");
  ASSIGN_OR_RETURN(int64_t dim_attr, attrs.GetInt("dim", 0));
  auto dim = NormalizeDim(dim_attr, in[0].rank());
  RETURN_IF_ERROR(WithSelf(in[0], dim.status()));
  TensorType piece = in[0];
  piece.shape.erase(piece.shape.begin() + *dim);
  return TypeList(static_cast<size_t>(in[0].shape[*dim]), piece);
}

// squeeze.dims(self; dim list): each named dim removed if its size is 1;
// squeeze(self): every size-1 dim removed.
InferFn SqueezeInfer(bool has_dims) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    std::vector<bool> drop(in[0].rank(), !has_dims);
    if (has_dims) {
      ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dim"));
      for (int64_t dim : dims) {
        auto d = NormalizeDim(dim, in[0].rank());
        RETURN_IF_ERROR(WithSelf(in[0], d.status()));
        if (in[0].rank() > 0) drop[*d] = true;
      }
    }
    TensorType out{in[0].dtype, {}};
    for (int d = 0; d < in[0].rank(); ++d) {
      if (!(drop[d] && in[0].shape[d] == 1)) out.shape.push_back(in[0].shape[d]);
    }
    return TypeList{out};
  };
}

}  // namespace

void RegisterSlicingOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  RegisterOp(registry, "select.int", 1, 1, 1, kNone, SelectInfer, {"select_copy.int"});
  RegisterOp(registry, "select_backward", 1, 1, 1, kNone, SliceBackwardInfer(true));
  RegisterOp(registry, "slice.Tensor", 1, 1, 1, kNone, SliceInfer, {"slice_copy.Tensor"});
  RegisterOp(registry, "slice_backward", 1, 1, 1, kNone, SliceBackwardInfer(false));
  RegisterOp(registry, "cat", 1, -1, 1, kNone, CatInfer);
  RegisterOp(registry, "stack", 1, -1, 1, kNone, StackInfer);
  RegisterOp(registry, "split.Tensor", 1, 1, kVariableOutputs, kNone, SplitInfer(false),
             {"split_copy.Tensor", "unsafe_split.Tensor"});
  RegisterOp(registry, "split_with_sizes", 1, 1, kVariableOutputs, kNone, SplitInfer(true),
             {"split_with_sizes_copy", "unsafe_split_with_sizes"});
  RegisterOp(registry, "unbind.int", 1, 1, kVariableOutputs, kNone, UnbindInfer, {"unbind_copy.int"});
  RegisterOp(registry, "squeeze.dims", 1, 1, 1, AliasKind::kView, SqueezeInfer(true), {"squeeze_copy.dims"});
  RegisterOp(registry, "squeeze", 1, 1, 1, AliasKind::kView, SqueezeInfer(false), {"squeeze_copy"});
  // _reshape_alias (of a contiguous tensor, the only kind here) is a view.
  registry.Alias("view", "_reshape_alias");
}

}  // namespace tandem
