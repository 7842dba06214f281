// CUDA kernel of fused_elementwise (ir/ops/fused_program.h). With generated
// kernels on (codegen/job_kernels.h: the default), the node runs the kernel
// the generator wrote for its program (codegen/pointwise_kernel.h,
// generated_kernels.h); otherwise, or when that kernel is unavailable (it
// did not compile or load: logged once), the interpreting kernel
// (fused_kernels.cu) runs the program. Both take the program's constants as
// codegen::LowerPointwise folds them (each into one value of the compute
// type, exactly as the unfused op wrappers in elementwise_ops.cc fold
// them), so both compute the same bits.
#include "base/status_macros.h"
#include "codegen/job_kernels.h"
#include "codegen/pointwise_kernel.h"
#include "ir/ops/fused_program.h"
#include "kernels/cuda/fused_launch.h"
#include "kernels/cuda/generated_kernels.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

static_assert(kFusedLaunchMaxInputs == kFusedMaxInputs && kFusedLaunchMaxOutputs == kFusedMaxOutputs &&
                  kFusedLaunchMaxInstructions == kFusedMaxInstructions &&
                  kFusedLaunchMaxRegisters == kFusedMaxRegisters,
              "the CUDA launch limits must be the program's limits");

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Launches the node's generated kernel; false (nothing launched) when
// generated kernels are off or this one is unavailable.
absl::StatusOr<bool> RunGenerated(const CudaKernelContext& context, const KernelArgs& args, const FusedProgram& program,
                                  DType dtype) {
  if (!codegen::GeneratedKernelsEnabled()) return false;
  codegen::PointwiseSpec spec;
  spec.program = program;
  spec.dtype = dtype;
  codegen::PointwiseKernelArgs launch;
  for (size_t k = 0; k < args.inputs.size(); ++k) {
    spec.scalar.push_back(args.inputs[k].type.rank() == 0);
    spec.input_dtypes.push_back(args.inputs[k].type.dtype);
    launch.inputs[k] = args.inputs[k].data;
  }
  for (size_t o = 0; o < args.outputs.size(); ++o) launch.outputs[o] = args.outputs[o].data;
  launch.n = args.outputs[0].numel();
  launch.skip_if_error = context.error.word;
  absl::StatusOr<cudaKernel_t> kernel = LoadGeneratedKernel(codegen::GeneratePointwiseKernel(spec));
  if (!kernel.ok()) return false;
  RETURN_IF_ERROR(Launched(args, LaunchPointwise(*kernel, dtype, launch, context.native), dtype));
  return true;
}

absl::Status FusedElementwiseKernel(const CudaKernelContext& context, const KernelArgs& args) {
  ASSIGN_OR_RETURN(FusedProgram program, DecodeFusedProgram(args.node->attrs, static_cast<int>(args.inputs.size())));
  const DType dtype = args.outputs[0].type.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && !IsHalf(dtype)) return UnsupportedDType(args, dtype);
  if (args.outputs.size() != program.outputs.size()) {
    return absl::InternalError(absl::StrCat(args.node->op, ": ", args.outputs.size(), " output buffers for ",
                                            program.outputs.size(), " program outputs"));
  }
  ASSIGN_OR_RETURN(bool generated, RunGenerated(context, args, program, dtype));
  if (generated) return absl::OkStatus();
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
  const std::vector<codegen::PointwiseStep> steps = codegen::LowerPointwise(program, dtype);
  for (size_t i = 0; i < steps.size(); ++i) {
    FusedDeviceInstruction& d = params.code[i];
    d.op = steps[i].op;
    d.dst = steps[i].dst;
    d.a = steps[i].a;
    d.b = steps[i].b >= 0 ? steps[i].b : 0;
    d.param = steps[i].param;
  }
  return Launched(args, LaunchFusedElementwise(dtype, params, context.native), dtype);
}

}  // namespace

void AddFusedKernels(CudaKernelTable& table) { table[kFusedElementwiseOp] = FusedElementwiseKernel; }

}  // namespace tandem::cuda
