// Registry entries of the random ops (bernoulli.p, rand, randn) and of the
// remaining "empty" constructors (empty.memory_format, empty_strided,
// new_empty_strided).
//
// Random numbers come from native_dropout's scheme (dropout_mask.h,
// random_draws.h): a counter-based hash of the node's `seed` attribute, the
// optional int64 rank-0 seed tensor (a per-iteration feed: a front end that
// feeds a new seed each iteration gets fresh numbers each iteration) and the
// element index. Both backends draw the same numbers bit for bit (randn up
// to the last bits of log and cos); they match PyTorch's only in
// distribution.
//
// Tandem's "empty" tensors are zeros, so no result depends on stale memory;
// every tensor is contiguous, so empty_strided's stride is checked for form
// only, and the layout arguments (memory_format, layout, device, pin_memory)
// never reach the IR (the capture drops them).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ir/op_registry.h"
#include "ir/ops/infer_util.h"

namespace tandem {
namespace {

using ops::TypeList;

absl::StatusOr<Shape> SizeAttr(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  for (int64_t d : size) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'size' [", absl::StrJoin(size, ", "), "] has the negative dim ", d));
    }
  }
  return Shape(size.begin(), size.end());
}

// empty_strided's `stride`: one entry per dim of `size`, none negative.
absl::Status StrideAttr(const Attrs& attrs, const Shape& size) {
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, attrs.GetInts("stride"));
  if (stride.size() != size.size()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'stride' [", absl::StrJoin(stride, ", "), "] has ",
                                                   stride.size(), " entries for size ", ShapeString(size)));
  }
  for (int64_t s : stride) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'stride' [", absl::StrJoin(stride, ", "), "] has the negative stride ", s));
    }
  }
  return absl::OkStatus();
}

// empty.memory_format(size; dtype), empty_strided(size, stride; dtype),
// new_empty_strided(self; size, stride, dtype = self's).
InferFn EmptyInfer(bool strided, bool has_self) {
  return [=](const Attrs& attrs, absl::Span<const TensorType> in) -> absl::StatusOr<TypeList> {
    ASSIGN_OR_RETURN(Shape size, SizeAttr(attrs));
    if (strided) RETURN_IF_ERROR(StrideAttr(attrs, size));
    ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", has_self ? in[0].dtype : DType::kFloat32));
    RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kStorableAndHalfTypes));
    return TypeList{{dtype, size}};
  };
}

// The optional seed tensor (input `index`) and the `seed` attribute.
absl::Status SeedChecks(const Attrs& attrs, absl::Span<const TensorType> in, size_t index) {
  RETURN_IF_ERROR(attrs.GetInt("seed", 0).status());
  if (in.size() > index && !(in[index] == TensorType{DType::kInt64, {}})) {
    return absl::InvalidArgumentError(
        absl::StrCat("seed is ", in[index].ToString(), "; expected an int64 rank-0 tensor"));
  }
  return absl::OkStatus();
}

// bernoulli.p(self[, seed]; p, seed): 0 or 1 of self's type, each 1 with
// probability p (resolved to 2^-24, as dropout's p).
absl::StatusOr<TypeList> BernoulliInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  RETURN_IF_ERROR(ops::RequireDType("self", in[0], ops::kStorableAndHalfTypes));
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("p", 0.5));
  if (!(p >= 0.0 && p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'p' is ", p, "; expected a probability in [0, 1]"));
  }
  RETURN_IF_ERROR(SeedChecks(attrs, in, 1));
  return TypeList{in[0]};
}

// rand / randn([seed]; size, dtype = float32, seed): uniform in [0, 1) /
// standard normal, of a float dtype.
absl::StatusOr<TypeList> RandInfer(const Attrs& attrs, absl::Span<const TensorType> in) {
  ASSIGN_OR_RETURN(Shape size, SizeAttr(attrs));
  ASSIGN_OR_RETURN(DType dtype, attrs.GetDType("dtype", DType::kFloat32));
  RETURN_IF_ERROR(ops::RequireDTypeValue("attribute 'dtype'", dtype, ops::kFloatAndHalfTypes));
  RETURN_IF_ERROR(SeedChecks(attrs, in, 0));
  return TypeList{{dtype, size}};
}

}  // namespace

void RegisterRandomOps(OpRegistry& registry) {
  using ops::RegisterOp;
  constexpr AliasKind kNone = AliasKind::kNone;
  RegisterOp(registry, "empty.memory_format", 0, 0, 1, kNone, EmptyInfer(false, false));
  RegisterOp(registry, "empty_strided", 0, 0, 1, kNone, EmptyInfer(true, false));
  RegisterOp(registry, "new_empty_strided", 1, 1, 1, kNone, EmptyInfer(true, true));
  // bernoulli.p never reads self's values, so its output may take self's place.
  RegisterOp(registry, "bernoulli.p", 1, 2, 1, AliasKind::kInPlace, BernoulliInfer);
  RegisterOp(registry, "rand", 0, 1, 1, kNone, RandInfer);
  RegisterOp(registry, "randn", 0, 1, 1, kNone, RandInfer);
}

}  // namespace tandem
