// Kernels of 16-bit float tensors for the LSTM and GRU (half_launch.h): the
// fused layers' forward and backward steps (recurrent_step_kernels.cuh,
// instantiated for bfloat16 and float16) and the activations of the LSTM's
// per-step cell math (sigmoid, tanh and their backwards). Every value is
// widened to float32, computed on, and rounded once when stored; each
// output element is written by the thread that read its inputs, so an
// output may be an input.
#include "kernels/cuda/half_common.cuh"
#include "kernels/cuda/half_launch.h"
#include "kernels/cuda/recurrent_step_kernels.cuh"

namespace tandem::cuda {
namespace {

// The float32 formulas of activation_kernels.cu (PointwiseFn), on widened
// elements.
template <HalfActivationOp kOp>
__device__ __forceinline__ float Activate(float a, float b) {
  if constexpr (kOp == HalfActivationOp::kSigmoid) {
    return 1.0f / (1.0f + expf(-a));
  } else if constexpr (kOp == HalfActivationOp::kTanh) {
    return tanhf(a);
  } else if constexpr (kOp == HalfActivationOp::kSigmoidBackward) {
    return a * (1.0f - b) * b;
  } else {
    return a * (1.0f - b * b);
  }
}

constexpr bool IsBinary(HalfActivationOp op) {
  return op == HalfActivationOp::kSigmoidBackward || op == HalfActivationOp::kTanhBackward;
}

template <typename H, HalfActivationOp kOp>
__global__ void HalfActivationKernel(int64_t n, const H* a, const H* b, H* out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    float y = 0.0f;
    if constexpr (IsBinary(kOp)) y = Widen(b[i]);
    out[i] = Narrow<H>(Activate<kOp>(Widen(a[i]), y));
  }
}

template <HalfActivationOp kOp>
cudaError_t RunActivation(DType dtype, int64_t n, const void* a, const void* b, void* out, cudaStream_t stream) {
  const bool launched = DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    HalfActivationKernel<H, kOp><<<Blocks(n), kThreads, 0, stream>>>(n, static_cast<const H*>(a),
                                                                     static_cast<const H*>(b), static_cast<H*>(out));
  });
  return launched ? LaunchError() : cudaErrorInvalidValue;
}

// A recurrent step struct over untyped pointers, launched on the 16-bit
// `dtype`'s elements.
template <template <typename> class Step>
cudaError_t LaunchHalfStep(DType dtype, const Step<void>& step, cudaStream_t stream) {
  cudaError_t status = cudaErrorInvalidValue;
  DispatchHalf(dtype, [&](auto tag) {
    using H = decltype(tag);
    status = recurrent_steps::LaunchStep(CastStep<H>(step), stream);
  });
  return status;
}

}  // namespace

cudaError_t LaunchHalfLstmForwardStep(DType dtype, const HalfLstmForwardStep& step, cudaStream_t stream) {
  return LaunchHalfStep(dtype, step, stream);
}

cudaError_t LaunchHalfLstmBackwardStep(DType dtype, const HalfLstmBackwardStep& step, cudaStream_t stream) {
  return LaunchHalfStep(dtype, step, stream);
}

cudaError_t LaunchHalfGruForwardStep(DType dtype, const HalfGruForwardStep& step, cudaStream_t stream) {
  return LaunchHalfStep(dtype, step, stream);
}

cudaError_t LaunchHalfGruBackwardStep(DType dtype, const HalfGruBackwardStep& step, cudaStream_t stream) {
  return LaunchHalfStep(dtype, step, stream);
}

cudaError_t LaunchHalfActivation(HalfActivationOp op, DType dtype, int64_t n, const void* a, const void* b, void* out,
                                 cudaStream_t stream) {
  if (!IsHalfDType(dtype)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  using Op = HalfActivationOp;
  switch (op) {
    case Op::kSigmoid:
      return RunActivation<Op::kSigmoid>(dtype, n, a, b, out, stream);
    case Op::kTanh:
      return RunActivation<Op::kTanh>(dtype, n, a, b, out, stream);
    case Op::kSigmoidBackward:
      return RunActivation<Op::kSigmoidBackward>(dtype, n, a, b, out, stream);
    case Op::kTanhBackward:
      return RunActivation<Op::kTanhBackward>(dtype, n, a, b, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
