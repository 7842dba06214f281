// CUDA kernel of fused_elementwise (ir/ops/fused_program.h): decodes the
// program, folds each instruction's constants into one value of the
// tensors' dtype exactly as the unfused op wrappers do (elementwise_ops.cc:
// alpha rounded to the dtype; add/sub.Scalar's alpha * other multiplied in
// the dtype, then negated for sub), and launches fused_kernels.cu. A 16-bit
// program's constants are float32 values formed as the unfused 16-bit ops
// form them: a .Scalar op's other rounded to the 16-bit type first, alpha
// a float32 number, products in float32.
#include "base/status_macros.h"
#include "ir/ops/fused_program.h"
#include "kernels/cuda/fused_launch.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/half.h"

namespace tandem::cuda {
namespace {

static_assert(kFusedLaunchMaxInputs == kFusedMaxInputs && kFusedLaunchMaxOutputs == kFusedMaxOutputs &&
                  kFusedLaunchMaxInstructions == kFusedMaxInstructions &&
                  kFusedLaunchMaxRegisters == kFusedMaxRegisters,
              "the CUDA launch limits must be the program's limits");

// `value` rounded to T, held exactly in a double.
template <typename T>
double In(double value) {
  return static_cast<double>(static_cast<T>(value));
}

template <typename T>
FusedDeviceInstruction Lower(const FusedInstruction& ins) {
  FusedDeviceInstruction d;
  d.dst = ins.dst;
  d.a = ins.a;
  d.b = ins.b >= 0 ? ins.b : 0;
  switch (ins.op) {
    case FusedOpcode::kAdd:
      d.op = FusedDeviceOp::kFma;
      d.param = In<T>(ins.alpha);
      break;
    case FusedOpcode::kSub:
      d.op = FusedDeviceOp::kFma;
      d.param = -In<T>(ins.alpha);
      break;
    case FusedOpcode::kMul:
      d.op = FusedDeviceOp::kMul;
      break;
    case FusedOpcode::kDiv:
      d.op = FusedDeviceOp::kDiv;
      break;
    case FusedOpcode::kAddScalar:
    case FusedOpcode::kSubScalar: {
      const T product = static_cast<T>(ins.alpha) * static_cast<T>(ins.other);
      d.op = FusedDeviceOp::kAddConst;
      d.param = static_cast<double>(ins.op == FusedOpcode::kAddScalar ? product : -product);
      break;
    }
    case FusedOpcode::kMulScalar:
      d.op = FusedDeviceOp::kMulConst;
      d.param = In<T>(ins.other);
      break;
    case FusedOpcode::kDivScalar:
      d.op = FusedDeviceOp::kDivConst;
      d.param = In<T>(ins.other);
      break;
    case FusedOpcode::kNeg:
      d.op = FusedDeviceOp::kNeg;
      break;
    case FusedOpcode::kSqrt:
      d.op = FusedDeviceOp::kSqrt;
      break;
    case FusedOpcode::kMaximum:
      d.op = FusedDeviceOp::kMax;
      break;
    case FusedOpcode::kMinimum:
      d.op = FusedDeviceOp::kMin;
      break;
  }
  return d;
}

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// An instruction of a 16-bit program, lowered as a float32 one once its
// `other` (the .Scalar ops' number) is rounded to the 16-bit dtype.
FusedDeviceInstruction LowerHalf(DType dtype, FusedInstruction ins) {
  const float other = static_cast<float>(ins.other);
  ins.other = dtype == DType::kBFloat16 ? BFloat16(other).ToFloat() : Float16(other).ToFloat();
  return Lower<float>(ins);
}

absl::Status FusedElementwiseKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(FusedProgram program, DecodeFusedProgram(args.node->attrs, static_cast<int>(args.inputs.size())));
  const DType dtype = args.outputs[0].type.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && !IsHalf(dtype)) return UnsupportedDType(args, dtype);
  if (args.outputs.size() != program.outputs.size()) {
    return absl::InternalError(absl::StrCat(args.node->op, ": ", args.outputs.size(), " output buffers for ",
                                            program.outputs.size(), " program outputs"));
  }
  FusedLaunchParams params;
  params.n = args.outputs[0].numel();
  params.num_inputs = program.num_inputs;
  params.num_instructions = static_cast<int32_t>(program.code.size());
  params.num_outputs = static_cast<int32_t>(program.outputs.size());
  params.skip_if_error = context.error.word;
  for (int k = 0; k < program.num_inputs; ++k) {
    params.inputs[k] = args.inputs[k].data;
    params.scalar[k] = args.inputs[k].type.rank() == 0;
    params.scalar_dtype[k] = args.inputs[k].type.dtype;
  }
  for (int o = 0; o < params.num_outputs; ++o) {
    params.outputs[o] = args.outputs[o].data;
    params.output_regs[o] = program.outputs[o];
  }
  for (size_t i = 0; i < program.code.size(); ++i) {
    if (IsHalf(dtype)) {
      params.code[i] = LowerHalf(dtype, program.code[i]);
    } else {
      params.code[i] = dtype == DType::kFloat32 ? Lower<float>(program.code[i]) : Lower<double>(program.code[i]);
    }
  }
  return Launched(args, LaunchFusedElementwise(dtype, params, context.native), dtype);
}

}  // namespace

void AddFusedKernels(CudaKernelTable& table) { table[kFusedElementwiseOp] = FusedElementwiseKernel; }

}  // namespace tandem::cuda
