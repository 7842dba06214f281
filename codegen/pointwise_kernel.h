// The kernel generator's pointwise part: CUDA C++ source for one
// `fused_elementwise` node (ir/ops/fused_program.h), specialized on its
// program, its dtype and which of its inputs are rank-0, to be compiled with
// NVRTC (codegen/kernel_cache.h) and launched by the CUDA backend
// (kernels/cuda/fused_ops.cc) in place of the interpreting kernel.
//
// What the generated kernel does: every thread runs the program's
// instructions as straight-line code on values in registers, 16 bytes of
// elements at a time (four float32, two float64, eight 16-bit) when every
// tensor is 16-byte aligned, then element by element for the rest; a
// grid-stride loop covers the tensors. Rounding is pinned as the
// interpreter pins it (LowerPointwise: one fused multiply-add for
// add/sub.Tensor, IEEE round-to-nearest intrinsics for the rest, 16-bit
// programs computing in float32 and rounding each result to their type with
// the same PTX conversions), so a generated kernel's outputs equal the
// interpreter's bit for bit. An output may be the buffer of an input: each
// thread reads all of its elements' inputs before it writes them.
//
// Plain functions; thread-safe.
#ifndef TANDEM_CODEGEN_POINTWISE_KERNEL_H_
#define TANDEM_CODEGEN_POINTWISE_KERNEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/pointwise_op.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/ops/fused_program.h"

namespace tandem::codegen {

// One lowered instruction (codegen/pointwise_op.h).
struct PointwiseStep {
  PointwiseOp op = PointwiseOp::kNeg;
  int dst = 0;
  int a = 0;
  int b = -1;  // a register when the op reads y; -1 otherwise
  double param = 0.0;
};

// The program's instructions with their constants folded into one value of
// the compute type each, exactly as the unfused ops' CUDA wrappers fold
// them (elementwise_ops.cc): alpha rounded to the dtype; add/sub.Scalar's
// alpha * other multiplied in the dtype; a 16-bit program's .Scalar `other`
// rounded to its 16-bit type first, alpha a float32 number.
std::vector<PointwiseStep> LowerPointwise(const FusedProgram& program, DType dtype);

// One fused node as the generator sees it.
struct PointwiseSpec {
  FusedProgram program;
  DType dtype = DType::kFloat32;  // of the outputs and of every non-scalar input
  // Per input: rank 0 (one element, read once per thread; for a 16-bit
  // program of any float dtype, rounded to the program's type when read).
  std::vector<bool> scalar;
  std::vector<DType> input_dtypes;
};

// The spec of node `node` of `graph`; INVALID_ARGUMENT for a node that is
// not a fused_elementwise node the generator covers (its dtype is float32,
// float64, bfloat16 or float16).
absl::StatusOr<PointwiseSpec> PointwiseSpecOf(const Graph& graph, int node);

// A kernel's name and its whole source (an `extern "C" __global__`
// function named `name`, and the batch entry below; no #include). The name is "tandem_pw_" and a hash
// of the rest of the source, so equal names mean equal kernels.
struct GeneratedKernel {
  std::string name;
  std::string source;
};

GeneratedKernel GeneratePointwiseKernel(const PointwiseSpec& spec);

// The generated kernel's one parameter, by value. Eight-byte fields only,
// so that the host's and the device's layouts agree.
struct PointwiseKernelArgs {
  const void* inputs[kFusedMaxInputs] = {};
  void* outputs[kFusedMaxOutputs] = {};
  int64_t n = 0;  // elements of each non-scalar tensor
  // The lane's error word, or null: when an earlier kernel of the
  // iteration reported bad data (*skip_if_error != 0) the kernel writes
  // nothing (as the interpreter: an in-place optimizer update keeps its
  // old value).
  const int64_t* skip_if_error = nullptr;
};
static_assert(sizeof(PointwiseKernelArgs) == 8 * (kFusedMaxInputs + kFusedMaxOutputs + 2));

// The source's second entry point, BatchEntryName(kernel), runs the program
// over up to kPointwiseBatchMax alike tensors in one launch (the nodes of
// an optimizer step, one per parameter): block b works on segment s where
// block_start[s] <= b < block_start[s + 1]. 3,856 bytes: within the 4 KiB
// that every driver takes as a kernel's parameters.
inline constexpr int kPointwiseBatchMax = 32;
struct PointwiseBatchArgs {
  PointwiseKernelArgs segments[kPointwiseBatchMax];
  int64_t block_start[kPointwiseBatchMax + 1] = {};
  int64_t count = 0;
};
static_assert(sizeof(PointwiseBatchArgs) <= 4096);
std::string BatchEntryName(const GeneratedKernel& kernel);

// Threads per block of every generated pointwise kernel, and the elements a
// thread takes per step on the aligned path.
inline constexpr int kPointwiseBlock = 256;
int PointwiseElementsPerVector(DType dtype);

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_POINTWISE_KERNEL_H_
