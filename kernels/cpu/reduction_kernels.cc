// Reference CPU kernels of the reductions and scans: sum, mean (over dims or
// all), prod, var, linalg_vector_norm, amax / amin, argmax / argmin,
// max.dim / min.dim, cumsum, and the stable sorts sort and topk. Float sums, products, norms and variances
// accumulate in double (a variance in two passes: the mean, then the squared
// deviations), integer ones in int64 with two's-complement wraparound (as
// PyTorch's); each result is rounded once to the output dtype. 16-bit
// tensors run the float32 kernels through WithHalf (half_kernels.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/reduction_rules.h"
#include "ir/ops/shape_rules.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

// Where each input element lands in the output of a reduction over the dims
// in `mask`: the contiguous strides of the keepdim shape, with 0 for a
// reduced dim. `count` is the number of elements per output.
std::vector<int64_t> OutputStrides(const Shape& shape, const std::vector<bool>& mask, int64_t* count) {
  std::vector<int64_t> strides = ContiguousStrides(ReducedShape(shape, mask, /*keepdim=*/true));
  *count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) {
      strides[d] = 0;
      *count *= shape[d];
    }
  }
  return strides;
}

// Calls f(input index, output index) for every input element, in row-major
// order (so each output sees its elements in their order along the reduced
// dims).
template <typename F>
void ForEachReduced(const Shape& shape, const std::vector<bool>& mask, F&& f) {
  int64_t count;
  std::vector<int64_t> strides = OutputStrides(shape, mask, &count);
  ForEachIndex<1>(shape, {strides}, [&](int64_t i, const std::array<int64_t, 1>& off) { f(i, off[0]); });
}

// The mask of a single-dim op's `dim` (SingleDimOf: -1 is every dim).
std::vector<bool> MaskForDim(int rank, int dim) {
  std::vector<bool> mask(rank, dim < 0);
  if (dim >= 0 && rank > 0) mask[dim] = true;
  return mask;
}

// Wrapping integer arithmetic (signed overflow is undefined in C++).
int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t WrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Calls f(In{}, Out{}) for an input and output dtype pair of the numeric
// types.
template <typename F>
absl::Status DispatchPair(const KernelArgs& args, F&& f) {
  return DispatchNumeric(args, args.inputs[0].type.dtype, [&](auto in_tag) {
    return DispatchNumeric(args, args.outputs[0].type.dtype, [&](auto out_tag) { return f(in_tag, out_tag); });
  });
}

// ---- sum, mean ----

// out = sum of `in` over the dims in `mask` (divided by the count for mean).
template <typename In, typename Out>
void ReduceSum(const TensorArg& in, const TensorArg& out, const std::vector<bool>& mask, bool mean) {
  using Acc = std::conditional_t<std::is_floating_point_v<In> || std::is_floating_point_v<Out>, double, int64_t>;
  int64_t count;
  OutputStrides(in.type.shape, mask, &count);
  std::vector<Acc> acc(static_cast<size_t>(out.numel()), Acc(0));
  const In* x = in.as<const In>();
  ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) {
    if constexpr (std::is_floating_point_v<Acc>) {
      acc[j] += static_cast<Acc>(x[i]);
    } else {
      acc[j] = WrapAdd(acc[j], static_cast<Acc>(x[i]));
    }
  });
  Out* y = out.as<Out>();
  for (size_t j = 0; j < acc.size(); ++j) {
    if constexpr (std::is_floating_point_v<Acc>) {
      // count == 0 gives NaN (0 / 0), as PyTorch's mean of an empty slice.
      y[j] = Convert<Out>(mean ? acc[j] / static_cast<double>(count) : acc[j]);
    } else {
      y[j] = static_cast<Out>(acc[j]);
    }
  }
}

template <bool kMean>
absl::Status ReduceKernel(const KernelArgs& args, bool all_dims) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  std::vector<int64_t> dims;
  if (!all_dims) {
    ASSIGN_OR_RETURN(dims, args.node->attrs.GetInts("dim", std::vector<int64_t>{}));
  }
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReductionMask(dims, in.type.rank()));
  return DispatchPair(args, [&](auto in_tag, auto out_tag) {
    ReduceSum<decltype(in_tag), decltype(out_tag)>(in, out, mask, kMean);
    return absl::OkStatus();
  });
}

absl::Status SumKernel(const KernelArgs& args) { return ReduceKernel<false>(args, /*all_dims=*/true); }
absl::Status SumDimKernel(const KernelArgs& args) { return ReduceKernel<false>(args, /*all_dims=*/false); }
absl::Status MeanKernel(const KernelArgs& args) { return ReduceKernel<true>(args, /*all_dims=*/true); }
absl::Status MeanDimKernel(const KernelArgs& args) { return ReduceKernel<true>(args, /*all_dims=*/false); }

// ---- prod ----

template <bool kAllDims>
absl::Status ProdKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  int dim = -1;
  if constexpr (!kAllDims) {
    ASSIGN_OR_RETURN(dim, SingleDimOf(args.node->attrs, in.type));
  }
  const std::vector<bool> mask = MaskForDim(in.type.rank(), dim);
  return DispatchPair(args, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    constexpr bool kFloat = std::is_floating_point_v<Out>;
    // int64 converted to a float result first, as PyTorch converts self.
    std::vector<std::conditional_t<kFloat, double, int64_t>> acc(static_cast<size_t>(out.numel()), 1);
    const In* x = in.as<const In>();
    ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) {
      if constexpr (kFloat) {
        acc[j] *= static_cast<double>(x[i]);
      } else {
        acc[j] = WrapMul(acc[j], Convert<int64_t>(x[i]));
      }
    });
    Out* y = out.as<Out>();
    for (size_t j = 0; j < acc.size(); ++j) y[j] = static_cast<Out>(acc[j]);
    return absl::OkStatus();
  });
}

// ---- var ----

absl::Status VarKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  ASSIGN_OR_RETURN(double correction, VarianceCorrectionOf(args.node->op, args.node->attrs));
  return DispatchFloat(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t count;
    OutputStrides(in.type.shape, mask, &count);
    const T* x = in.as<const T>();
    std::vector<double> mean(static_cast<size_t>(out.numel()), 0.0), squares(mean.size(), 0.0);
    ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) { mean[j] += x[i]; });
    for (double& m : mean) m /= static_cast<double>(count);
    ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) {
      const double d = x[i] - mean[j];
      squares[j] += d * d;
    });
    // max(0, N - correction): 0 gives inf (or NaN for 0 / 0), as in PyTorch.
    const double divisor = std::max(0.0, static_cast<double>(count) - correction);
    T* y = out.as<T>();
    for (size_t j = 0; j < squares.size(); ++j) y[j] = static_cast<T>(squares[j] / divisor);
    return absl::OkStatus();
  });
}

// ---- linalg_vector_norm ----

absl::Status VectorNormKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(VectorNorm norm, VectorNormOf(args.node->attrs));
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  return DispatchFloat(args, in.type.dtype, [&](auto in_tag) {
    using In = decltype(in_tag);
    return DispatchFloat(args, out.type.dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      const double init = norm.kind == NormKind::kMinAbs ? std::numeric_limits<double>::infinity() : 0.0;
      std::vector<double> acc(static_cast<size_t>(out.numel()), init);
      const In* x = in.as<const In>();
      ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) {
        const double a = std::fabs(static_cast<double>(x[i]));
        double& s = acc[j];
        switch (norm.kind) {
          case NormKind::kSumSquares:
            s += a * a;
            break;
          case NormKind::kSumAbs:
            s += a;
            break;
          case NormKind::kMaxAbs:
            s = (std::isnan(a) || a > s) ? a : s;
            break;  // NaN sticks
          case NormKind::kMinAbs:
            s = (std::isnan(a) || a < s) ? a : s;
            break;
          case NormKind::kCountNonZero:
            s += x[i] != In(0) ? 1.0 : 0.0;
            break;
          case NormKind::kSumPow:
            s += std::pow(a, norm.p);
            break;
        }
      });
      Out* y = out.as<Out>();
      for (size_t j = 0; j < acc.size(); ++j) {
        double v = acc[j];
        if (norm.kind == NormKind::kSumSquares) v = std::sqrt(v);
        if (norm.kind == NormKind::kSumPow) v = std::pow(v, 1.0 / norm.p);
        y[j] = static_cast<Out>(v);
      }
      return absl::OkStatus();
    });
  });
}

// ---- amax, amin ----

template <bool kMax>
absl::Status ExtremumKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedDimsOf(args.node->attrs, in.type));
  return DispatchNumeric(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    // The registry refuses empty reductions, so every output takes a value.
    T* y = out.as<T>();
    const T init =
        kMax ? (std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest())
             : (std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max());
    for (int64_t j = 0; j < out.numel(); ++j) y[j] = init;
    const T* x = in.as<const T>();
    ForEachReduced(in.type.shape, mask, [&](int64_t i, int64_t j) {
      const T v = x[i];
      // A NaN replaces anything and is never replaced (v > NaN is false).
      if (IsNan(v) || (kMax ? v > y[j] : v < y[j])) y[j] = v;
    });
    return absl::OkStatus();
  });
}

// ---- argmax, argmin, max.dim, min.dim ----

// Position of the first extreme of each [outer, size, inner] slice; a NaN
// counts as the extreme of both kinds (the first NaN wins), as in PyTorch.
// `values` may be null.
template <bool kMax, typename T>
void ArgExtremum(const T* x, const DimSplit& s, T* values, int64_t* indices) {
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const T* row = x + o * s.size * s.inner + i;
      int64_t best = 0;
      for (int64_t r = 1; r < s.size; ++r) {
        const T v = row[r * s.inner];
        const T b = row[best * s.inner];
        if (IsNan(b)) break;  // a NaN is final
        if (IsNan(v) || (kMax ? v > b : v < b)) best = r;
      }
      const int64_t j = o * s.inner + i;
      indices[j] = best;
      if (values != nullptr) values[j] = row[best * s.inner];
    }
  }
}

template <bool kMax, bool kValues>
absl::Status ArgExtremumKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  ASSIGN_OR_RETURN(int dim, SingleDimOf(args.node->attrs, in.type, /*optional=*/!kValues));
  const DimSplit split = SplitForDim(in.type.shape, dim);
  return DispatchNumeric(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* values = kValues ? args.outputs[0].as<T>() : nullptr;
    int64_t* indices = args.outputs[kValues ? 1 : 0].as<int64_t>();
    ArgExtremum<kMax>(in.as<const T>(), split, values, indices);
    return absl::OkStatus();
  });
}

// ---- cumsum ----

absl::Status CumsumKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const TensorArg& out = args.outputs[0];
  ASSIGN_OR_RETURN(int dim, SingleDimOf(args.node->attrs, in.type));
  const DimSplit s = SplitAtDim(in.type.shape, dim);
  return DispatchPair(args, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* x = in.as<const In>();
    Out* y = out.as<Out>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        const int64_t base = o * s.size * s.inner + i;
        if constexpr (std::is_floating_point_v<Out>) {
          double acc = 0;
          for (int64_t r = 0; r < s.size; ++r) {
            acc += static_cast<double>(x[base + r * s.inner]);
            y[base + r * s.inner] = static_cast<Out>(acc);
          }
        } else {
          int64_t acc = 0;
          for (int64_t r = 0; r < s.size; ++r) {
            acc = WrapAdd(acc, Convert<int64_t>(x[base + r * s.inner]));
            y[base + r * s.inner] = acc;
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---- sort, topk ----

// The order of sort and topk: NaN above every number, and equal values in
// the order of their positions (a stable sort, whichever the direction).
template <typename T>
bool SortsBefore(T a, T b, bool descending) {
  const bool a_nan = IsNan(a), b_nan = IsNan(b);
  if (a_nan || b_nan) return descending ? (a_nan && !b_nan) : (!a_nan && b_nan);
  return descending ? a > b : a < b;
}

// The first `k` of each line along the dim of `s`, in that order, with their
// positions.
template <typename T>
void SortLines(const T* x, const DimSplit& s, int64_t k, bool descending, T* values, int64_t* indices) {
  std::vector<int64_t> order(static_cast<size_t>(s.size));
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const T* line = x + o * s.size * s.inner + i;
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return SortsBefore(line[a * s.inner], line[b * s.inner], descending);
      });
      const int64_t base = o * k * s.inner + i;
      for (int64_t m = 0; m < k; ++m) {
        values[base + m * s.inner] = line[order[m] * s.inner];
        indices[base + m * s.inner] = order[m];
      }
    }
  }
}

// sort (kTopk false: every element, `descending`) and topk (the `k`
// largest, or smallest without `largest`, sorted whatever `sorted` says).
template <bool kTopk>
absl::Status SortKernel(const KernelArgs& args) {
  const TensorArg& in = args.inputs[0];
  const Attrs& attrs = args.node->attrs;
  Attrs with_dim = attrs;
  if (!attrs.Has("dim")) with_dim.Set("dim", int64_t{-1});
  ASSIGN_OR_RETURN(int dim, SingleDimOf(with_dim, in.type));
  const DimSplit s = SplitAtDim(in.type.shape, dim);
  int64_t k = s.size;
  bool descending;
  if constexpr (kTopk) {
    ASSIGN_OR_RETURN(k, attrs.GetInt("k"));
    ASSIGN_OR_RETURN(descending, attrs.GetBool("largest", true));
  } else {
    ASSIGN_OR_RETURN(descending, attrs.GetBool("descending", false));
  }
  return DispatchNumeric(args, in.type.dtype, [&](auto tag) {
    using T = decltype(tag);
    SortLines(in.as<const T>(), s, k, descending, args.outputs[0].as<T>(), args.outputs[1].as<int64_t>());
    return absl::OkStatus();
  });
}

}  // namespace

void AddReductionKernels(CpuKernelTable& table) {
  table["sum"] = WithHalf<SumKernel>;
  table["sum.dim_IntList"] = WithHalf<SumDimKernel>;
  table["mean"] = WithHalf<MeanKernel>;
  table["mean.dim"] = WithHalf<MeanDimKernel>;
  table["prod"] = WithHalf<ProdKernel<true>>;
  table["prod.dim_int"] = WithHalf<ProdKernel<false>>;
  table["var.correction"] = WithHalf<VarKernel>;
  table["var.dim"] = WithHalf<VarKernel>;
  table["linalg_vector_norm"] = WithHalf<VectorNormKernel>;
  table["amax"] = WithHalf<ExtremumKernel<true>>;
  table["amin"] = WithHalf<ExtremumKernel<false>>;
  table["argmax"] = WithHalf<ArgExtremumKernel<true, false>>;
  table["argmin"] = WithHalf<ArgExtremumKernel<false, false>>;
  table["max.dim"] = WithHalf<ArgExtremumKernel<true, true>>;
  table["min.dim"] = WithHalf<ArgExtremumKernel<false, true>>;
  table["cumsum"] = WithHalf<CumsumKernel>;
  table["sort"] = WithHalf<SortKernel<false>>;
  table["topk"] = WithHalf<SortKernel<true>>;
}

}  // namespace tandem::cpu
