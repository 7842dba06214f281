// Building blocks of the reference CPU kernels (kernels/cpu only): dtype
// dispatch, value conversion, and iteration over a broadcast index space.
// Header-only templates; stateless and thread-safe.
#ifndef TANDEM_KERNELS_CPU_KERNEL_UTIL_H_
#define TANDEM_KERNELS_CPU_KERNEL_UTIL_H_

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/kernel.h"
#include "kernels/kernel_table.h"

namespace tandem::cpu {

// Canonical op name -> kernel (kernels/kernel_table.h); each family file adds its kernels.
using CpuKernelTable = KernelTable<CpuKernelFn>;
void AddElementwiseKernels(CpuKernelTable& table);
void AddLinalgKernels(CpuKernelTable& table);
void AddReductionKernels(CpuKernelTable& table);
void AddShapeKernels(CpuKernelTable& table);
void AddLossKernels(CpuKernelTable& table);
void AddFactoryKernels(CpuKernelTable& table);
void AddConvolutionKernels(CpuKernelTable& table);
void AddPoolingKernels(CpuKernelTable& table);
void AddBatchNormKernels(CpuKernelTable& table);
void AddIndexingKernels(CpuKernelTable& table);
void AddSlicingKernels(CpuKernelTable& table);
void AddActivationKernels(CpuKernelTable& table);
void AddComparisonKernels(CpuKernelTable& table);
void AddNormalizationKernels(CpuKernelTable& table);
void AddAttentionKernels(CpuKernelTable& table);
void AddFusedKernels(CpuKernelTable& table);
void AddRecurrentKernels(CpuKernelTable& table);
void AddMathKernels(CpuKernelTable& table);
void AddGroupNormKernels(CpuKernelTable& table);
void AddResampleKernels(CpuKernelTable& table);
void AddPaddingKernels(CpuKernelTable& table);
void AddPooling3dKernels(CpuKernelTable& table);
void AddAdvancedIndexKernels(CpuKernelTable& table);  // index.Tensor, index_put, scatter_add/_reduce, masked_scatter
void AddStridedKernels(CpuKernelTable& table);        // as_strided, diagonal, flip, repeat, slice/select scatters
void AddRandomKernels(CpuKernelTable& table);         // bernoulli.p, rand, randn, empty.memory_format, empty_strided
void AddTestKernels(CpuKernelTable& table);           // test_fault

inline absl::Status UnsupportedDType(const KernelArgs& args, DType dtype) {
  return absl::UnimplementedError(
      absl::StrCat(args.node->op, ": the CPU backend has no kernel for dtype ", DTypeName(dtype)));
}

// Calls f(T{}) with T the C++ type of `dtype`, for the dtypes of each set;
// UNIMPLEMENTED for others. f returns absl::Status.
template <typename F>
absl::Status DispatchFloat(const KernelArgs& args, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    default:
      return UnsupportedDType(args, dtype);
  }
}

template <typename F>
absl::Status DispatchNumeric(const KernelArgs& args, DType dtype, F&& f) {
  if (dtype == DType::kInt64) return f(int64_t{});
  return DispatchFloat(args, dtype, f);
}

template <typename F>
absl::Status DispatchStorable(const KernelArgs& args, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kInt32:
      return f(int32_t{});
    case DType::kBool:
      return f(bool{});
    default:
      return DispatchNumeric(args, dtype, f);
  }
}

// Calls f(I{}) with I the C++ type of an index tensor's dtype (int64_t or
// int32_t: the ops that index with data take both); UNIMPLEMENTED for others.
template <typename F>
absl::Status DispatchIndex(const KernelArgs& args, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kInt64:
      return f(int64_t{});
    case DType::kInt32:
      return f(int32_t{});
    default:
      return UnsupportedDType(args, dtype);
  }
}

// Calls f(E{}) with E an unsigned integer of `dtype`'s element size: kernels
// that only move elements (copies, gathers, scatters) need no more of the
// dtype than its size.
template <typename F>
absl::Status DispatchElementBytes(const KernelArgs& args, DType dtype, F&& f) {
  switch (DTypeSize(dtype)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return UnsupportedDType(args, dtype);
  }
}

// A C++ cast, except that bool is "nonzero" and that a floating value an
// integer type cannot hold (NaN, infinities, out of range; a C++ cast of it
// is undefined) converts as a GPU does it: NaN to 0, the rest saturated to
// the type's range (what the CUDA kernels' conversions give).
template <typename To, typename From>
To Convert(From value) {
  if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (value != value) return To(0);
    if (value <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (value >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

// Element 0 of `t` converted to T, whatever t's dtype (a rank-0 operand).
template <typename T>
T LoadScalar(const TensorArg& t) {
  switch (t.type.dtype) {
    case DType::kFloat32:
      return Convert<T>(*t.as<const float>());
    case DType::kFloat64:
      return Convert<T>(*t.as<const double>());
    case DType::kInt64:
      return Convert<T>(*t.as<const int64_t>());
    case DType::kInt32:
      return Convert<T>(*t.as<const int32_t>());
    case DType::kBool:
      return Convert<T>(*t.as<const bool>());
    // A 16-bit rank-0 operand of a float32 or float64 op (exact in float).
    case DType::kBFloat16:
      return Convert<T>(t.as<const BFloat16>()->ToFloat());
    case DType::kFloat16:
      return Convert<T>(t.as<const Float16>()->ToFloat());
  }
  return T{};
}

// Visits every index of `shape` in row-major order, calling
// f(linear_index, offsets) where offsets[k] = sum(index[d] * strides[k][d]).
// The innermost dim is a plain loop, so strided reads cost one add each.
template <size_t K, typename F>
void ForEachIndex(const Shape& shape, const std::array<std::vector<int64_t>, K>& strides, F&& f) {
  const int64_t numel = NumElements(shape);
  if (numel == 0) return;
  const int rank = static_cast<int>(shape.size());
  std::array<int64_t, K> base{};
  if (rank == 0) {
    f(int64_t{0}, base);
    return;
  }
  const int64_t inner = shape[rank - 1];
  std::array<int64_t, K> inner_stride;
  for (size_t k = 0; k < K; ++k) inner_stride[k] = strides[k][rank - 1];
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, K> offsets;
  for (int64_t start = 0; start < numel; start += inner) {
    for (int64_t j = 0; j < inner; ++j) {
      for (size_t k = 0; k < K; ++k) offsets[k] = base[k] + j * inner_stride[k];
      f(start + j, offsets);
    }
    for (int d = rank - 2; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k) base[k] += strides[k][d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < K; ++k) base[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_KERNEL_UTIL_H_
