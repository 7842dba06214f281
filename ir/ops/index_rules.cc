#include "ir/ops/index_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"
#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"

namespace tandem {
namespace {

std::string List(const std::vector<int64_t>& values) { return absl::StrCat("[", absl::StrJoin(values, ", "), "]"); }

}  // namespace

absl::StatusOr<AdvancedIndex> ResolveAdvancedIndex(const Attrs& attrs, const Shape& self,
                                                   const std::vector<Shape>& indices) {
  const int rank = static_cast<int>(self.size());
  const int k = static_cast<int>(indices.size());
  if (k == 0) return absl::InvalidArgumentError("no index tensors were given; at least one is needed");
  if (k > rank) {
    return absl::InvalidArgumentError(absl::StrCat("self is of rank ", rank, " but ", k, " index tensors were given"));
  }
  AdvancedIndex index;
  if (attrs.Has("indexed_dims")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("indexed_dims"));
    if (static_cast<int>(dims.size()) != k) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'indexed_dims' ", List(dims), " names ", dims.size(),
                                                     " dims but ", k, " index tensors were given"));
    }
    for (int j = 0; j < k; ++j) {
      if (dims[j] < 0 || dims[j] >= rank || (j > 0 && dims[j] <= dims[j - 1])) {
        return absl::InvalidArgumentError(absl::StrCat("attribute 'indexed_dims' ", List(dims),
                                                       " must name ascending dims of self, in [0, ", rank, ")"));
      }
      index.dims.push_back(static_cast<int>(dims[j]));
    }
  } else {
    for (int j = 0; j < k; ++j) index.dims.push_back(j);
  }
  for (int j = 0; j < k; ++j) {
    auto shape = BroadcastShapes(index.broadcast, indices[j]);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("indices[", j, "] of shape ", ShapeString(indices[j]),
                                                     " does not broadcast with the index tensors before it (",
                                                     ShapeString(index.broadcast), ")"));
    }
    index.broadcast = *shape;
  }
  // B alone may be large where the result is empty (a dim of size 0 beside
  // it): kernels that walk B need its size to be a number.
  if (!CheckedNumElements(index.broadcast).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the index tensors broadcast to ", ShapeString(index.broadcast), ", too many elements"));
  }
  const bool adjacent = index.dims.back() - index.dims.front() == k - 1;
  index.broadcast_at = adjacent ? index.dims.front() : 0;
  std::vector<bool> indexed(rank, false);
  for (int d : index.dims) indexed[d] = true;
  Shape rest;
  for (int d = 0; d < rank; ++d) {
    if (!indexed[d]) rest.push_back(self[d]);
  }
  index.result.assign(rest.begin(), rest.begin() + index.broadcast_at);
  index.result.insert(index.result.end(), index.broadcast.begin(), index.broadcast.end());
  index.result.insert(index.result.end(), rest.begin() + index.broadcast_at, rest.end());
  return index;
}

std::vector<int64_t> AdvancedIndexSelfStrides(const AdvancedIndex& index, const Shape& self) {
  const std::vector<int64_t> self_strides = ContiguousStrides(self);
  std::vector<bool> indexed(self.size(), false);
  for (int d : index.dims) indexed[d] = true;
  std::vector<int64_t> rest;
  for (size_t d = 0; d < self.size(); ++d) {
    if (!indexed[d]) rest.push_back(self_strides[d]);
  }
  std::vector<int64_t> strides(rest.begin(), rest.begin() + index.broadcast_at);
  strides.insert(strides.end(), index.broadcast.size(), 0);
  strides.insert(strides.end(), rest.begin() + index.broadcast_at, rest.end());
  return strides;
}

namespace {

// `b_strides` (one per dim of B) placed at B's dims of the result; 0 elsewhere.
std::vector<int64_t> PlaceInResult(const AdvancedIndex& index, const std::vector<int64_t>& b_strides) {
  std::vector<int64_t> strides(index.result.size(), 0);
  for (size_t d = 0; d < b_strides.size(); ++d) strides[index.broadcast_at + d] = b_strides[d];
  return strides;
}

}  // namespace

std::vector<int64_t> AdvancedIndexTensorStrides(const AdvancedIndex& index, const Shape& shape) {
  return PlaceInResult(index, BroadcastStrides(shape, index.broadcast));
}

std::vector<int64_t> AdvancedIndexPositionStrides(const AdvancedIndex& index) {
  return PlaceInResult(index, ContiguousStrides(index.broadcast));
}

absl::StatusOr<StridedView> ResolveAsStrided(const Attrs& attrs, const Shape& self) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, attrs.GetInts("size"));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, attrs.GetInts("stride"));
  ASSIGN_OR_RETURN(int64_t offset, attrs.GetInt("storage_offset", 0));
  if (size.size() != stride.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attributes 'size' ", List(size), " and 'stride' ", List(stride), " differ in length"));
  }
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'storage_offset' is ", offset, "; must be >= 0"));
  }
  bool empty = false;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] < 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'size' ", List(size), " is negative"));
    if (stride[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'stride' ", List(stride), " is negative; negative strides are not supported"));
    }
    empty = empty || size[d] == 0;
  }
  StridedView view{Shape(size.begin(), size.end()), stride, offset};
  if (empty) return view;
  // The farthest element the view reads, overflow-checked: every other one
  // lies between offset and it.
  std::optional<int64_t> last = offset;
  for (size_t d = 0; d < size.size() && last.has_value(); ++d) {
    std::optional<int64_t> span = CheckedMul(size[d] - 1, stride[d]);
    last = span.has_value() ? CheckedAdd(*last, *span) : std::nullopt;
  }
  const int64_t numel = NumElements(self);
  if (!last.has_value() || *last >= numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the view of size ", List(size), ", stride ", List(stride), " and storage_offset ", offset, " reads element ",
        last.has_value() ? absl::StrCat(*last) : std::string("past 2^63"), " of self, which has ", numel, " elements"));
  }
  return view;
}

absl::StatusOr<StridedView> ResolveDiagonal(const Attrs& attrs, const Shape& self) {
  ASSIGN_OR_RETURN(int64_t offset, attrs.GetInt("offset", 0));
  ASSIGN_OR_RETURN(int64_t dim1_attr, attrs.GetInt("dim1", 0));
  ASSIGN_OR_RETURN(int64_t dim2_attr, attrs.GetInt("dim2", 1));
  const int rank = static_cast<int>(self.size());
  if (rank < 2) return absl::InvalidArgumentError(absl::StrCat("self is of rank ", rank, "; diagonal needs rank >= 2"));
  ASSIGN_OR_RETURN(int dim1, NormalizeDim(dim1_attr, rank));
  ASSIGN_OR_RETURN(int dim2, NormalizeDim(dim2_attr, rank));
  if (dim1 == dim2) {
    return absl::InvalidArgumentError(
        absl::StrCat("attributes 'dim1' ", dim1_attr, " and 'dim2' ", dim2_attr, " name the same dim"));
  }
  const int64_t s1 = self[dim1], s2 = self[dim2];
  // The diagonal's length, without forming offset +- size (offset may be
  // any int64).
  int64_t length = 0;
  if (offset >= 0) {
    length = offset >= s2 ? 0 : std::min(s1, s2 - offset);
  } else {
    length = offset <= -s1 ? 0 : std::min(s1 + offset, s2);
  }
  const std::vector<int64_t> strides = ContiguousStrides(self);
  StridedView view;
  for (int d = 0; d < rank; ++d) {
    if (d == dim1 || d == dim2) continue;
    view.sizes.push_back(self[d]);
    view.strides.push_back(strides[d]);
  }
  view.sizes.push_back(length);
  view.strides.push_back(strides[dim1] + strides[dim2]);
  if (length > 0) view.offset = offset >= 0 ? offset * strides[dim2] : -offset * strides[dim1];
  return view;
}

absl::StatusOr<StridedView> ResolveFlip(const Attrs& attrs, const Shape& self) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dims"));
  const int rank = static_cast<int>(self.size());
  StridedView view{self, ContiguousStrides(self), 0};
  std::vector<bool> flipped(std::max(rank, 1), false);
  for (int64_t dim : dims) {
    ASSIGN_OR_RETURN(int d, NormalizeDim(dim, rank));
    if (flipped[d])
      return absl::InvalidArgumentError(absl::StrCat("attribute 'dims' ", List(dims), " names dim ", d, " twice"));
    flipped[d] = true;
    if (rank == 0 || self[d] == 0) continue;
    view.offset += (self[d] - 1) * view.strides[d];
    view.strides[d] = -view.strides[d];
  }
  return view;
}

absl::StatusOr<RepeatPlan> ResolveRepeat(const Attrs& attrs, const Shape& self) {
  ASSIGN_OR_RETURN(std::vector<int64_t> repeats, attrs.GetInts("repeats"));
  if (repeats.size() < self.size()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'repeats' ", List(repeats),
                                                   " has fewer entries than self ", ShapeString(self), " has dims"));
  }
  const size_t lead = repeats.size() - self.size();
  const std::vector<int64_t> strides = ContiguousStrides(self);
  RepeatPlan plan;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t r = repeats[i];
    if (r < 0) return absl::InvalidArgumentError(absl::StrCat("attribute 'repeats' ", List(repeats), " is negative"));
    plan.view.sizes.push_back(r);
    plan.view.strides.push_back(0);
    if (i < lead) {
      plan.result.push_back(r);
      continue;
    }
    const int64_t s = self[i - lead];
    std::optional<int64_t> size = CheckedMul(r, s);
    if (!size.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'repeats' ", List(repeats), " overflows dim ", i));
    }
    plan.result.push_back(*size);
    plan.view.sizes.push_back(s);
    plan.view.strides.push_back(strides[i - lead]);
  }
  return plan;
}

StridedView SliceView(const SliceRange& range, const Shape& shape, bool drop_dim) {
  StridedView view{shape, ContiguousStrides(shape), 0};
  view.offset = range.length > 0 ? range.start * view.strides[range.dim] : 0;
  view.sizes[range.dim] = range.length;
  view.strides[range.dim] *= range.step;
  if (drop_dim) {
    view.sizes.erase(view.sizes.begin() + range.dim);
    view.strides.erase(view.strides.begin() + range.dim);
  }
  return view;
}

}  // namespace tandem
