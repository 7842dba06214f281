// Padding on CUDA: constant_pad_nd (any dtype, moved as 1-, 2-, 4- or
// 8-byte elements), reflection and replication padding over up to three
// dims, and the latter's backward ops. Forwards take a thread per output
// element; the backward takes a thread per input element and gathers the
// output gradients that read it (at most three positions or ranges per dim,
// ir/ops/spatial_index.h's preimages), so it needs no atomics and repeats
// bit for bit. Sums run in double for float32 and float64, float32 for the
// 16-bit types.
#include <type_traits>

#include "ir/ops/spatial_index.h"
#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/spatial_launch.h"

namespace tandem::cuda {
namespace {

template <typename T>
using SumType = std::conditional_t<kIsHalfType<T>, float, double>;

struct VolumeIndex {
  int64_t plane, z, y, x;
};
__device__ __forceinline__ VolumeIndex SplitVolume(int64_t i, const int64_t (&dims)[3]) {
  VolumeIndex v;
  v.x = i % dims[2];
  i /= dims[2];
  v.y = i % dims[1];
  i /= dims[1];
  v.z = i % dims[0];
  v.plane = i / dims[0];
  return v;
}

__device__ __forceinline__ int64_t PadSource(bool reflect, int64_t o, int64_t before, int64_t in) {
  return reflect ? spatial::ReflectSource(o, before, in) : spatial::ReplicateSource(o, before, in);
}

template <typename T>
__global__ void PadKernel(PadLaunchParams p, const T* x, T* y) {
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex o = SplitVolume(i, p.out);
    const int64_t z = PadSource(p.reflect, o.z, p.before[0], p.in[0]);
    const int64_t yy = PadSource(p.reflect, o.y, p.before[1], p.in[1]);
    const int64_t xx = PadSource(p.reflect, o.x, p.before[2], p.in[2]);
    y[i] = x[((o.plane * p.in[0] + z) * p.in[1] + yy) * p.in[2] + xx];
  }
}

__device__ __forceinline__ spatial::PadPreimage Preimage(const PadLaunchParams& p, int d, int64_t x) {
  return p.reflect ? spatial::ReflectPreimage(x, p.before[d], p.in[d], p.out[d])
                   : spatial::ReplicatePreimage(x, p.before[d], p.in[d], p.out[d]);
}

template <typename T>
__global__ void PadBackwardKernel(PadLaunchParams p, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const VolumeIndex v = SplitVolume(i, p.in);
    const spatial::PadPreimage pz = Preimage(p, 0, v.z), py = Preimage(p, 1, v.y), px = Preimage(p, 2, v.x);
    const T* volume = dy + v.plane * p.out[0] * p.out[1] * p.out[2];
    S sum = 0;
    for (int a = 0; a < pz.count; ++a) {
      for (int64_t oz = pz.begin[a]; oz < pz.end[a]; ++oz) {
        for (int b = 0; b < py.count; ++b) {
          for (int64_t oy = py.begin[b]; oy < py.end[b]; ++oy) {
            const T* row = volume + (oz * p.out[1] + oy) * p.out[2];
            for (int c = 0; c < px.count; ++c) {
              for (int64_t ox = px.begin[c]; ox < px.end[c]; ++ox) sum += WidenTo<S>(row[ox]);
            }
          }
        }
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

// E is an unsigned integer of the element's size: values move as bits.
template <typename E>
__global__ void ConstantPadKernel(ConstantPadLaunchParams p, const E* x, E* y, E value) {
  int64_t total = 1;
  for (int d = 0; d < p.rank; ++d) total *= p.out[d];
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    int64_t rest = i, src = 0, stride = 1;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t o = rest % p.out[d];
      rest /= p.out[d];
      const int64_t s = o - p.before[d];
      inside = inside && s >= 0 && s < p.in[d];
      src += s * stride;
      stride *= p.in[d];
    }
    y[i] = inside ? x[src] : value;
  }
}

template <typename E>
cudaError_t LaunchConstantPadOf(const ConstantPadLaunchParams& p, int64_t total, const void* x, void* y,
                                cudaStream_t stream) {
  ConstantPadKernel<E><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const E*>(x), static_cast<E*>(y),
                                                               static_cast<E>(p.value));
  return LaunchError();
}

}  // namespace

cudaError_t LaunchPad(DType dtype, const PadLaunchParams& p, const void* x, void* y, cudaStream_t stream) {
  const int64_t total = p.planes * p.out[0] * p.out[1] * p.out[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    PadKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchPadBackward(DType dtype, const PadLaunchParams& p, const void* grad_output, void* grad_input,
                              cudaStream_t stream) {
  const int64_t total = p.planes * p.in[0] * p.in[1] * p.in[2];
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    PadBackwardKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchConstantPad(const ConstantPadLaunchParams& p, const void* x, void* y, cudaStream_t stream) {
  if (p.rank < 1 || p.rank > kMaxDims) return cudaErrorInvalidValue;
  int64_t total = 1;
  for (int d = 0; d < p.rank; ++d) total *= p.out[d];
  if (total == 0) return cudaSuccess;
  switch (p.element_bytes) {
    case 1:
      return LaunchConstantPadOf<uint8_t>(p, total, x, y, stream);
    case 2:
      return LaunchConstantPadOf<uint16_t>(p, total, x, y, stream);
    case 4:
      return LaunchConstantPadOf<uint32_t>(p, total, x, y, stream);
    case 8:
      return LaunchConstantPadOf<uint64_t>(p, total, x, y, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tandem::cuda
