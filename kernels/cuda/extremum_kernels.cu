// amax / amin (NaN-propagating maxima and minima) and argmax / argmin /
// max.dim / min.dim (the first extreme's position, a NaN counting as the
// extreme of both kinds) over generic_reduce.cuh's skeleton. Values are
// compared exactly (16-bit ones widened to float32), so every backend
// agrees bit for bit.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/generic_reduce.cuh"
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace tandem::cuda {
namespace {

// float for the 16-bit types, the type itself otherwise.
template <typename T>
using ValueOf = std::conditional_t<kIsHalfType<T>, float, T>;

template <typename V>
__device__ __forceinline__ V Lowest() {
  if constexpr (std::is_floating_point_v<V>) {
    return -std::numeric_limits<V>::infinity();
  } else {
    return std::numeric_limits<V>::lowest();
  }
}
template <typename V>
__device__ __forceinline__ V Highest() {
  if constexpr (std::is_floating_point_v<V>) {
    return std::numeric_limits<V>::infinity();
  } else {
    return std::numeric_limits<V>::max();
  }
}

template <typename T>
struct ExtremumOp {
  using In = T;
  using Acc = ValueOf<T>;
  bool max;
  T* out;

  __device__ __forceinline__ Acc Identity() const { return max ? Lowest<Acc>() : Highest<Acc>(); }
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const {
    if (IsNanValue(a)) return a;
    if (IsNanValue(b)) return b;
    return (max ? b > a : b < a) ? b : a;
  }
  __device__ __forceinline__ void Add(Acc& acc, In x, int64_t) const { acc = Combine(acc, WidenTo<Acc>(x)); }
  __device__ __forceinline__ void Store(int64_t j, const Acc& acc, int64_t) const { out[j] = RoundTo<T>(acc); }
};

// A candidate extreme: its value and position (-1: none yet).
template <typename V>
struct ArgAcc {
  V value;
  int64_t index;
};

template <typename T>
struct ArgExtremumOp {
  using In = T;
  using Acc = ArgAcc<ValueOf<T>>;
  bool max;
  T* values;  // may be null
  int64_t* indices;

  __device__ __forceinline__ Acc Identity() const { return Acc{ValueOf<T>(0), -1}; }
  // The better of two candidates: a NaN beats a number, a larger (smaller)
  // value beats a smaller (larger) one, and of equals the lower position wins.
  __device__ __forceinline__ Acc Combine(const Acc& a, const Acc& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = IsNanValue(a.value), b_nan = IsNanValue(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (a_nan || a.value == b.value) return a.index < b.index ? a : b;
    return (max ? a.value > b.value : a.value < b.value) ? a : b;
  }
  __device__ __forceinline__ void Add(Acc& acc, In x, int64_t r) const {
    acc = Combine(acc, Acc{WidenTo<ValueOf<T>>(x), r});
  }
  __device__ __forceinline__ void Store(int64_t j, const Acc& acc, int64_t) const {
    indices[j] = acc.index;
    if (values != nullptr) values[j] = RoundTo<T>(acc.value);
  }
};

}  // namespace

cudaError_t LaunchExtremum(bool max, DType dtype, const ReduceLayout& layout, const void* in, void* out,
                           cudaStream_t stream) {
  cudaError_t error = cudaErrorInvalidValue;
  DispatchReduceType(dtype, [&](auto tag) {
    using T = decltype(tag);
    error = LaunchGenericReduce(ExtremumOp<T>{max, static_cast<T*>(out)}, layout, static_cast<const T*>(in), stream);
  });
  return error;
}

cudaError_t LaunchArgExtremum(bool max, DType dtype, const ReduceLayout& layout, const void* in, void* values,
                              int64_t* indices, cudaStream_t stream) {
  if (layout.general) return cudaErrorInvalidValue;
  cudaError_t error = cudaErrorInvalidValue;
  DispatchReduceType(dtype, [&](auto tag) {
    using T = decltype(tag);
    error = LaunchGenericReduce(ArgExtremumOp<T>{max, static_cast<T*>(values), indices}, layout,
                                static_cast<const T*>(in), stream);
  });
  return error;
}

}  // namespace tandem::cuda
