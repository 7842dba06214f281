// Reference CPU kernels of the ops that index with data (embedding and its
// backward, gather, scatter, index_select; index_put is with index.Tensor in
// advanced_index_kernels.cc) and of arange and the "empty" constructors
// (zeros here).
//
// Indices are data: every one is checked before anything is read or
// written, and a bad one fails the kernel with INVALID_ARGUMENT naming the
// op, the position and the value, in the same words for either index dtype
// (int64 or int32: the kernels read an index tensor as its own type I,
// dispatched per tensor). Gradient sums (embedding_dense_backward)
// accumulate in double.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

absl::Status BadIndex(const KernelArgs& args, absl::string_view input, int64_t position, int64_t value, int64_t size,
                      absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(args.node->op, ": ", input, "[", position, "] is ", value,
                                                 ", outside [0, ", size, ") (", what, ")"));
}

// Every index of `index` (elements of type I) is in [0, size).
template <typename I>
absl::Status CheckIndices(const KernelArgs& args, const TensorArg& index, absl::string_view input, int64_t size,
                          absl::string_view what) {
  const I* p = index.as<const I>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t v = p[i];
    if (v >= size || v < 0) return BadIndex(args, input, i, v, size, what);
  }
  return absl::OkStatus();
}

absl::Status EmbeddingKernel(const KernelArgs& args) {
  const TensorArg& weight = args.inputs[0];
  const TensorArg& indices = args.inputs[1];
  const int64_t rows = weight.type.shape[0];
  const int64_t width = weight.type.shape[1];
  const size_t row_bytes = static_cast<size_t>(width) * DTypeSize(weight.type.dtype);
  const auto* w = static_cast<const uint8_t*>(weight.data);
  auto* out = static_cast<uint8_t*>(args.outputs[0].data);
  return DispatchIndex(args, indices.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckIndices<I>(args, indices, "indices", rows, "the rows of weight"));
    const I* idx = indices.as<const I>();
    for (int64_t n = 0; n < indices.numel(); ++n) {
      std::memcpy(out + n * row_bytes, w + static_cast<int64_t>(idx[n]) * row_bytes, row_bytes);
    }
    return absl::OkStatus();
  });
}

// grad_weight[v] = sum of grad_output rows whose index is v (padding_idx's
// row stays 0), summed in double by index order.
absl::Status EmbeddingBackwardKernel(const KernelArgs& args) {
  const TensorArg& grad = args.inputs[0];
  const TensorArg& indices = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t padding_idx, args.node->attrs.GetInt("padding_idx", -1));
  const int64_t rows = out.type.shape[0];
  const int64_t width = out.type.shape[1];
  // The ids as int64, checked.
  std::vector<int64_t> idx(static_cast<size_t>(indices.numel()));
  RETURN_IF_ERROR(DispatchIndex(args, indices.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckIndices<I>(args, indices, "indices", rows, "num_weights"));
    std::copy_n(indices.as<const I>(), idx.size(), idx.begin());
    return absl::OkStatus();
  }));
  std::vector<int64_t> order(idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  return DispatchFloat(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.as<const T>();
    T* o = out.as<T>();
    std::fill(o, o + out.numel(), T(0));
    std::vector<double> acc(static_cast<size_t>(width));
    for (size_t start = 0; start < order.size();) {
      const int64_t v = idx[order[start]];
      size_t end = start;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (; end < order.size() && idx[order[end]] == v; ++end) {
        const T* row = g + order[end] * width;
        for (int64_t c = 0; c < width; ++c) acc[c] += static_cast<double>(row[c]);
      }
      if (v != padding_idx) {
        for (int64_t c = 0; c < width; ++c) o[v * width + c] = static_cast<T>(acc[c]);
      }
      start = end;
    }
    return absl::OkStatus();
  });
}

// Strides of `shape` (contiguous) with dim `dim` zeroed: where an element of
// an index tensor lands in `shape`, apart from the index value itself.
std::vector<int64_t> StridesWithoutDim(const Shape& shape, int dim) {
  std::vector<int64_t> strides = ContiguousStrides(shape);
  if (!strides.empty()) strides[dim] = 0;
  return strides;
}

absl::Status GatherKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  const int64_t size = self.type.rank() == 0 ? 1 : self.type.shape[dim];
  const int64_t dim_stride = self.type.rank() == 0 ? 0 : ContiguousStrides(self.type.shape)[dim];
  return DispatchIndex(args, index.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckIndices<I>(args, index, "index", size, "the size of self's dim"));
    const I* idx = index.as<const I>();
    return DispatchElementBytes(args, self.type.dtype, [&](auto tag) {
      using E = decltype(tag);
      const E* x = self.as<const E>();
      E* y = out.as<E>();
      ForEachIndex<1>(index.type.shape, {StridesWithoutDim(self.type.shape, dim)},
                      [&](int64_t i, const std::array<int64_t, 1>& off) {
                        y[i] = x[off[0] + static_cast<int64_t>(idx[i]) * dim_stride];
                      });
      return absl::OkStatus();
    });
  });
}

// out = self; out[... index[i] ...] = value or src[i] along dim.
template <bool kSrc>
absl::Status ScatterKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  const int64_t size = self.type.rank() == 0 ? 1 : self.type.shape[dim];
  double value = 0.0;
  if constexpr (!kSrc) {
    ASSIGN_OR_RETURN(value, args.node->attrs.GetFloat("value"));
  }
  const int64_t dim_stride = self.type.rank() == 0 ? 0 : ContiguousStrides(self.type.shape)[dim];
  return DispatchIndex(args, index.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckIndices<I>(args, index, "index", size, "the size of self's dim"));
    if (out.data != self.data) std::memmove(out.data, self.data, out.type.bytes());
    const I* idx = index.as<const I>();
    return DispatchStorable(args, self.type.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* y = out.as<T>();
      const T fill = Convert<T>(value);
      const T* src = kSrc ? args.inputs[2].as<const T>() : nullptr;
      const std::vector<int64_t> src_strides =
          kSrc ? ContiguousStrides(args.inputs[2].type.shape) : std::vector<int64_t>(index.type.rank(), 0);
      ForEachIndex<2>(index.type.shape, {StridesWithoutDim(self.type.shape, dim), src_strides},
                      [&](int64_t i, const std::array<int64_t, 2>& off) {
                        y[off[0] + static_cast<int64_t>(idx[i]) * dim_stride] = kSrc ? src[off[1]] : fill;
                      });
      return absl::OkStatus();
    });
  });
}

absl::Status IndexSelectKernel(const KernelArgs& args) {
  const TensorArg& self = args.inputs[0];
  const TensorArg& index = args.inputs[1];
  ASSIGN_OR_RETURN(int64_t dim_attr, args.node->attrs.GetInt("dim"));
  ASSIGN_OR_RETURN(int dim, NormalizeDim(dim_attr, self.type.rank()));
  const DimSplit split = SplitAtDim(self.type.shape, dim);
  const int64_t n = index.numel();
  const size_t chunk = static_cast<size_t>(split.inner) * DTypeSize(self.type.dtype);
  const auto* x = static_cast<const uint8_t*>(self.data);
  auto* y = static_cast<uint8_t*>(args.outputs[0].data);
  return DispatchIndex(args, index.type.dtype, [&](auto index_tag) {
    using I = decltype(index_tag);
    RETURN_IF_ERROR(CheckIndices<I>(args, index, "index", split.size, "the size of self's dim"));
    const I* idx = index.as<const I>();
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(y + (o * n + j) * chunk, x + (o * split.size + static_cast<int64_t>(idx[j])) * chunk, chunk);
      }
    }
    return absl::OkStatus();
  });
}

// out[i] = start + i * step: exactly in int64 for integer attributes, in
// double (rounded once) otherwise.
absl::Status ArangeKernel(const KernelArgs& args) {
  const Attrs& attrs = args.node->attrs;
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(double start, attrs.GetFloat("start", 0.0));
  ASSIGN_OR_RETURN(double step, attrs.GetFloat("step", 1.0));
  auto int_start = attrs.GetInt("start", 0);
  auto int_step = attrs.GetInt("step", 1);
  const bool exact = int_start.ok() && int_step.ok();
  return DispatchNumeric(args, out.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = out.as<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      y[i] = exact ? static_cast<T>(*int_start + i * *int_step) : static_cast<T>(start + static_cast<double>(i) * step);
    }
    return absl::OkStatus();
  });
}

absl::Status ZerosKernel(const KernelArgs& args) {
  std::memset(args.outputs[0].data, 0, args.outputs[0].type.bytes());
  return absl::OkStatus();
}

}  // namespace

void AddIndexingKernels(CpuKernelTable& table) {
  table["embedding"] = WithHalf<EmbeddingKernel>;
  table["embedding_dense_backward"] = WithHalf<EmbeddingBackwardKernel>;
  table["gather"] = GatherKernel;
  table["scatter.value"] = ScatterKernel<false>;
  table["scatter.src"] = ScatterKernel<true>;
  table["index_select"] = IndexSelectKernel;
  table["arange.start_step"] = ArangeKernel;
  table["empty_like"] = ZerosKernel;
  table["empty_permuted"] = ZerosKernel;
}

}  // namespace tandem::cpu
