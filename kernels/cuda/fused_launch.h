// The launcher of the fused_elementwise CUDA kernel (fused_kernels.cu).
// Like launch.h: a plain function over raw device pointers and a parameter
// struct, no absl types; the op wrapper (fused_ops.cc) decodes and checks
// the program and folds its constants. Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_FUSED_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_FUSED_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "codegen/pointwise_op.h"
#include "ir/dtype.h"

namespace tandem::cuda {

inline constexpr int kFusedLaunchMaxInputs = 8;
inline constexpr int kFusedLaunchMaxInstructions = 32;
inline constexpr int kFusedLaunchMaxOutputs = 4;
inline constexpr int kFusedLaunchMaxRegisters = kFusedLaunchMaxInputs + kFusedLaunchMaxInstructions;

// The interpreter runs the generator's lowered instructions (the opcodes
// and their meaning: codegen/pointwise_op.h).
using FusedDeviceOp = codegen::PointwiseOp;

struct FusedDeviceInstruction {
  FusedDeviceOp op = FusedDeviceOp::kNeg;
  int32_t dst = 0;
  int32_t a = 0;
  int32_t b = 0;  // read only by kFma, kMul, kDiv, kMax, kMin, kThresholdBackward
  double param = 0.0;
  float param32 = 0.0f;  // param as float32, for float32 programs (set by LaunchFusedElementwise)
};

// Registers 0..num_inputs-1 are the inputs at the element index; an input
// with `scalar` set is one element read once per thread (a rank-0 input).
// Instructions write registers >= num_inputs; output o is register
// output_regs[o]. All tensors are of one dtype with `n` elements, except
// that a scalar input of a 16-bit program may be of any float dtype
// (`scalar_dtype`), rounded to the program's type when read.
struct FusedLaunchParams {
  int64_t n = 0;
  int32_t num_inputs = 0;
  int32_t num_instructions = 0;
  int32_t num_outputs = 0;
  const void* inputs[kFusedLaunchMaxInputs] = {};
  bool scalar[kFusedLaunchMaxInputs] = {};
  DType scalar_dtype[kFusedLaunchMaxInputs] = {};  // read by 16-bit programs only
  void* outputs[kFusedLaunchMaxOutputs] = {};
  int32_t output_regs[kFusedLaunchMaxOutputs] = {};
  FusedDeviceInstruction code[kFusedLaunchMaxInstructions] = {};
  // The lane's error word, or null: when a kernel earlier in the iteration
  // reported bad data (word[0] != 0) the kernel writes nothing, so an output
  // computed in place of a persistent tensor (an optimizer update,
  // compiler/update_schedule.h) keeps its old value.
  const int64_t* skip_if_error = nullptr;
};

// Runs the program at every element index; output o may be the buffer of an
// input (each thread reads all inputs at its indices before writing them).
// The program runs as given up to a renaming of its registers (values keep
// their order of evaluation and rounding). Dtypes: float32, float64,
// bfloat16, float16 (cudaErrorInvalidValue otherwise, or for a register out
// of range or read before it is written, without launching).
cudaError_t LaunchFusedElementwise(DType dtype, const FusedLaunchParams& params, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_FUSED_LAUNCH_H_
