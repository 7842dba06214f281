// Reference CPU kernels of advanced indexing (index.Tensor, index_put), the
// reducing scatters (scatter_add, scatter_reduce.two) and masked_scatter.
//
// Index values are data: every one is checked before anything is read or
// written, and a bad one fails the kernel with INVALID_ARGUMENT naming the
// op, the index tensor, the position and the value (in the same words for
// int64 and int32 index tensors). index.Tensor and index_put read their
// indices by the registry's rule (index_rules.h) and wrap negative ones, as
// PyTorch's advanced indexing does; the scatters take [0, size).
//
// index.Tensor and masked_scatter move bytes (every dtype). The scatters
// and index_put combine values in order, in the tensor's dtype (16-bit ones
// in float32, rounded once: WithHalf), as PyTorch's CPU kernels do; a
// scatter_reduce mean of integers rounds toward -infinity, as PyTorch's
// does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/index_rules.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/view_copy.h"

namespace tandem::cpu {
namespace {

void CopySelf(const TensorArg& self, const TensorArg& out) {
  if (out.data != self.data) std::memmove(out.data, self.data, out.type.bytes());
}

absl::StatusOr<AdvancedIndex> IndexOf(const KernelArgs& args, int count) {
  std::vector<Shape> shapes;
  for (int j = 0; j < count; ++j) shapes.push_back(args.inputs[1 + j].type.shape);
  return ResolveAdvancedIndex(args.node->attrs, args.inputs[0].type.shape, shapes);
}

// For each position of the broadcast index shape B, the element offset in
// self that the k index tensors (inputs 1..k) name together. Every index
// value is checked against [-size, size) of its dim first.
absl::StatusOr<std::vector<int64_t>> IndexedOffsets(const KernelArgs& args, const AdvancedIndex& index) {
  const Shape& self = args.inputs[0].type.shape;
  const std::vector<int64_t> self_strides = ContiguousStrides(self);
  // An empty result reads and writes nothing (B may still be large).
  const bool empty = NumElements(index.result) == 0;
  std::vector<int64_t> base(empty ? 0 : static_cast<size_t>(NumElements(index.broadcast)), 0);
  for (size_t j = 0; j < index.dims.size(); ++j) {
    const TensorArg& tensor = args.inputs[1 + j];
    const int dim = index.dims[j];
    const int64_t size = self[dim];
    RETURN_IF_ERROR(DispatchIndex(args, tensor.type.dtype, [&](auto tag) -> absl::Status {
      using I = decltype(tag);
      const I* p = tensor.as<const I>();
      for (int64_t i = 0; i < tensor.numel(); ++i) {
        const int64_t v = p[i];
        if (v < -size || v >= size) {
          return absl::InvalidArgumentError(absl::StrCat(args.node->op, ": indices[", j, "][", i, "] is ", v,
                                                         ", outside [", -size, ", ", size, ") (dim ", dim, " of self ",
                                                         ShapeString(self), ")"));
        }
      }
      if (empty) return absl::OkStatus();
      ForEachIndex<1>(index.broadcast, {BroadcastStrides(tensor.type.shape, index.broadcast)},
                      [&](int64_t b, const std::array<int64_t, 1>& off) {
                        const int64_t v = p[off[0]];
                        base[b] += (v < 0 ? v + size : v) * self_strides[dim];
                      });
      return absl::OkStatus();
    }));
  }
  return base;
}

// out = self[indices].
absl::Status IndexKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  ASSIGN_OR_RETURN(AdvancedIndex index, IndexOf(args, static_cast<int>(args.inputs.size()) - 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> base, IndexedOffsets(args, index));
  return DispatchElementBytes(args, self.type.dtype, [&](auto tag) {
    using E = decltype(tag);
    const E* x = self.as<const E>();
    E* y = args.outputs[0].as<E>();
    ForEachIndex<2>(index.result,
                    {AdvancedIndexSelfStrides(index, self.type.shape), AdvancedIndexPositionStrides(index)},
                    [&](int64_t i, const std::array<int64_t, 2>& off) { y[i] = x[off[0] + base[off[1]]]; });
    return absl::OkStatus();
  });
}

// out = self; out[indices] (+)= values (broadcast to self[indices]'s shape),
// in row-major order of that shape (with duplicate indices and no
// accumulate, the last write wins).
absl::Status IndexPutKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& values = args.inputs.back();
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(bool accumulate, args.node->attrs.GetBool("accumulate", false));
  ASSIGN_OR_RETURN(AdvancedIndex index, IndexOf(args, static_cast<int>(args.inputs.size()) - 2));
  ASSIGN_OR_RETURN(std::vector<int64_t> base, IndexedOffsets(args, index));
  CopySelf(self, out);
  return DispatchStorable(args, self.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = out.as<T>();
    const T* v = values.as<const T>();
    ForEachIndex<3>(index.result,
                    {AdvancedIndexSelfStrides(index, self.type.shape), AdvancedIndexPositionStrides(index),
                     BroadcastStrides(values.type.shape, index.result)},
                    [&](int64_t, const std::array<int64_t, 3>& off) {
                      T& dst = y[off[0] + base[off[1]]];
                      if constexpr (std::is_same_v<T, bool>) {
                        dst = accumulate ? (dst || v[off[2]]) : v[off[2]];
                      } else {
                        dst = accumulate ? static_cast<T>(dst + v[off[2]]) : v[off[2]];
                      }
                    });
    return absl::OkStatus();
  });
}

// ---- scatter_add, scatter_reduce.two ----

enum class Reduce { kSum, kProd, kMean, kAmax, kAmin };

absl::StatusOr<Reduce> ReduceAttr(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::string reduce, attrs.GetString("reduce"));
  if (reduce == "sum") return Reduce::kSum;
  if (reduce == "prod") return Reduce::kProd;
  if (reduce == "mean") return Reduce::kMean;
  if (reduce == "amax") return Reduce::kAmax;
  if (reduce == "amin") return Reduce::kAmin;
  return absl::InvalidArgumentError(absl::StrCat("attribute 'reduce' is \"", reduce, "\""));
}

// The value a reduction starts from when self is left out.
template <typename T>
T Identity(Reduce reduce) {
  switch (reduce) {
    case Reduce::kProd:
      return T(1);
    case Reduce::kAmax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    case Reduce::kAmin:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    default:
      return T(0);
  }
}

// amax / amin propagate NaN, as PyTorch's do.
template <typename T>
void Combine(Reduce reduce, T& dst, T v) {
  switch (reduce) {
    case Reduce::kSum:
    case Reduce::kMean:
      dst = static_cast<T>(dst + v);
      break;
    case Reduce::kProd:
      dst = static_cast<T>(dst * v);
      break;
    case Reduce::kAmax:
      if (v != v || v > dst) dst = dst != dst ? dst : v;
      break;
    case Reduce::kAmin:
      if (v != v || v < dst) dst = dst != dst ? dst : v;
      break;
  }
}

// Strides of contiguous `shape` with dim `dim` zeroed.
std::vector<int64_t> StridesWithoutDim(const Shape& shape, int dim) {
  std::vector<int64_t> strides = ContiguousStrides(shape);
  if (!strides.empty()) strides[dim] = 0;
  return strides;
}

// out = self; out[... index[i] ...] op= src[i] along dim. `counts` (mean
// only; self's shape) gets the number of values each element combined.
absl::Status ScatterReduce(const KernelArgs& args, Reduce reduce, bool include_self, int64_t* counts) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg& src = args.inputs[2];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  const int64_t size = self.type.rank() == 0 ? 1 : self.type.shape[dim];
  const int64_t dim_stride = self.type.rank() == 0 ? 0 : ContiguousStrides(self.type.shape)[dim];
  // Every index checked, as int64, before anything is written.
  std::vector<int64_t> idx(static_cast<size_t>(index.numel()));
  RETURN_IF_ERROR(DispatchIndex(args, index.type.dtype, [&](auto tag) -> absl::Status {
    const auto* p = index.as<const decltype(tag)>();
    for (int64_t i = 0; i < index.numel(); ++i) {
      idx[i] = p[i];
      if (idx[i] < 0 || idx[i] >= size) {
        return absl::InvalidArgumentError(absl::StrCat(args.node->op, ": index[", i, "] is ", idx[i], ", outside [0, ",
                                                       size, ") (dim ", dim, " of self ", self.type.ToString(), ")"));
      }
    }
    return absl::OkStatus();
  }));
  CopySelf(self, out);
  const std::array<std::vector<int64_t>, 2> strides = {StridesWithoutDim(self.type.shape, dim),
                                                       ContiguousStrides(src.type.shape)};
  auto run = [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    T* y = out.as<T>();
    const T* s = src.as<const T>();
    if (counts != nullptr) std::fill(counts, counts + out.numel(), include_self ? 1 : 0);
    if (!include_self) {
      ForEachIndex<2>(index.type.shape, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
        y[off[0] + idx[i] * dim_stride] = Identity<T>(reduce);
      });
    }
    ForEachIndex<2>(index.type.shape, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
      const int64_t target = off[0] + idx[i] * dim_stride;
      Combine(reduce, y[target], s[off[1]]);
      if (counts != nullptr) ++counts[target];
    });
    if (counts != nullptr) {
      for (int64_t i = 0; i < out.numel(); ++i) {
        const T n = static_cast<T>(std::max<int64_t>(counts[i], 1));
        if constexpr (std::is_integral_v<T>) {
          const T q = y[i] / n;
          y[i] = (q * n != y[i] && (y[i] < 0) != (n < 0)) ? static_cast<T>(q - 1) : q;  // floor
        } else {
          y[i] = y[i] / n;
        }
      }
    }
    return absl::OkStatus();
  };
  if (self.type.dtype == DType::kInt32) return run(int32_t{});
  return DispatchNumeric(args, self.type.dtype, run);
}

absl::Status ScatterAddKernel(const KernelArgs& args) { return ScatterReduce(args, Reduce::kSum, true, nullptr); }

absl::Status ScatterReduceKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(Reduce reduce, ReduceAttr(args.node->attrs));
  ASSIGN_OR_RETURN(bool include_self, args.node->attrs.GetBool("include_self", true));
  int64_t* counts = reduce == Reduce::kMean ? args.outputs[1].as<int64_t>() : nullptr;
  return ScatterReduce(args, reduce, include_self, counts);
}

// out[i] = mask[i] ? source[k] : self[i], k counting the true mask elements
// before i in row-major order (the mask broadcast to self's shape).
absl::Status MaskedScatterKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& mask = args.inputs[1];
  const TensorArg& source = args.inputs[2];
  const std::array<std::vector<int64_t>, 1> strides = {BroadcastStrides(mask.type.shape, self.type.shape)};
  const bool* m = mask.as<const bool>();
  int64_t trues = 0;
  ForEachIndex<1>(self.type.shape, strides, [&](int64_t, const std::array<int64_t, 1>& off) { trues += m[off[0]]; });
  if (trues > source.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.node->op, ": mask has ", trues, " true elements but source has only ", source.numel()));
  }
  return DispatchElementBytes(args, self.type.dtype, [&](auto tag) {
    using E = decltype(tag);
    const E* x = self.as<const E>();
    const E* s = source.as<const E>();
    E* y = args.outputs[0].as<E>();
    int64_t k = 0;
    ForEachIndex<1>(self.type.shape, strides,
                    [&](int64_t i, const std::array<int64_t, 1>& off) { y[i] = m[off[0]] ? s[k++] : x[i]; });
    return absl::OkStatus();
  });
}

}  // namespace

void AddAdvancedIndexKernels(CpuKernelTable& table) {
  table["index.Tensor"] = IndexKernel;
  table["index_put"] = WithHalf<IndexPutKernel>;
  table["scatter_add"] = WithHalf<ScatterAddKernel>;
  table["scatter_reduce.two"] = WithHalf<ScatterReduceKernel>;
  table["masked_scatter"] = MaskedScatterKernel;
}

}  // namespace tandem::cpu
