// Elementwise maps over broadcast operands for the reference CPU kernels of
// the activation and comparison families (kernels/cpu only). Header-only
// templates; stateless and thread-safe.
#ifndef TANDEM_KERNELS_CPU_BROADCAST_MAP_H_
#define TANDEM_KERNELS_CPU_BROADCAST_MAP_H_

#include <array>
#include <cstdint>
#include <vector>

#include "ir/ops/shape_rules.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {

// out[i] = f(values of in[0..N) at i as T) over out's shape (out of type Out).
// An operand whose dtype is not `compute` is rank-0 (the registry's type
// rule) and is read once, converted. Each out element is written after the
// operands at its index are read, so out may be a full-size in[0].
template <typename T, typename Out, size_t N, typename F>
void MapBroadcast(const std::array<const TensorArg*, N>& in, DType compute, const TensorArg& out, F&& f) {
  const Shape& shape = out.type.shape;
  std::array<std::vector<int64_t>, N> strides;
  std::array<const T*, N> data;
  std::array<T, N> scalars{};
  for (size_t k = 0; k < N; ++k) {
    if (in[k]->type.dtype != compute) {
      scalars[k] = LoadScalar<T>(*in[k]);
      data[k] = &scalars[k];
      strides[k].assign(shape.size(), 0);
    } else {
      data[k] = in[k]->template as<const T>();
      strides[k] = BroadcastStrides(in[k]->type.shape, shape);
    }
  }
  Out* o = out.as<Out>();
  ForEachIndex<N>(shape, strides, [&](int64_t i, const std::array<int64_t, N>& off) {
    std::array<T, N> v;
    for (size_t k = 0; k < N; ++k) v[k] = data[k][off[k]];
    o[i] = f(v);
  });
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_BROADCAST_MAP_H_
