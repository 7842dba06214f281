#include "codegen/pointwise_kernel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "codegen/job_kernels.h"
#include "codegen/kernel_cache.h"
#include "compiler/fuse_elementwise.h"
#include "compiler/wire_graph_test_util.h"
#include "ir/graph_builder.h"
#include "kernels/half.h"

namespace tandem::codegen {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

FusedInstruction Ins(FusedOpcode op, int dst, int a, int b = -1, double alpha = 1.0, double other = 0.0) {
  FusedInstruction ins;
  ins.op = op;
  ins.dst = dst;
  ins.a = a;
  ins.b = b;
  ins.alpha = alpha;
  ins.other = other;
  return ins;
}

PointwiseSpec Spec(DType dtype, int num_inputs, std::vector<FusedInstruction> code, std::vector<int> outputs) {
  PointwiseSpec spec;
  spec.dtype = dtype;
  spec.program.num_inputs = num_inputs;
  spec.program.code = std::move(code);
  spec.program.outputs = std::move(outputs);
  spec.scalar.assign(num_inputs, false);
  spec.input_dtypes.assign(num_inputs, dtype);
  return spec;
}

TEST(LowerPointwiseTest, FoldsConstantsAsTheUnfusedWrappersDo) {
  FusedProgram program;
  program.num_inputs = 2;
  program.code = {Ins(FusedOpcode::kSub, 2, 0, 1, 0.1), Ins(FusedOpcode::kSubScalar, 3, 2, -1, 0.3, 0.7),
                  Ins(FusedOpcode::kMulScalar, 4, 3, -1, 1.0, 0.1), Ins(FusedOpcode::kThresholdBackward, 5, 4, 0, 0.1)};
  program.outputs = {5};
  const std::vector<PointwiseStep> f32 = LowerPointwise(program, DType::kFloat32);
  ASSERT_EQ(f32.size(), 4u);
  EXPECT_EQ(f32[0].op, PointwiseOp::kFma);
  EXPECT_EQ(f32[0].param, -static_cast<double>(0.1f));
  EXPECT_EQ(f32[1].op, PointwiseOp::kAddConst);
  EXPECT_EQ(f32[1].param, -static_cast<double>(0.3f * 0.7f));
  EXPECT_EQ(f32[1].b, -1);
  EXPECT_EQ(f32[2].param, static_cast<double>(0.1f));
  EXPECT_EQ(f32[3].op, PointwiseOp::kThresholdBackward);
  EXPECT_EQ(f32[3].b, 0);
  EXPECT_EQ(f32[3].param, static_cast<double>(0.1f));
  const std::vector<PointwiseStep> f64 = LowerPointwise(program, DType::kFloat64);
  EXPECT_EQ(f64[0].param, -0.1);
  EXPECT_EQ(f64[1].param, -(0.3 * 0.7));
  // A 16-bit program rounds a .Scalar op's other to its type first.
  const std::vector<PointwiseStep> bf16 = LowerPointwise(program, DType::kBFloat16);
  EXPECT_EQ(bf16[2].param, static_cast<double>(BFloat16(0.1f).ToFloat()));
  EXPECT_NE(bf16[2].param, static_cast<double>(0.1f));
  EXPECT_EQ(bf16[1].param, -static_cast<double>(0.3f * BFloat16(0.7f).ToFloat()));
}

TEST(GeneratePointwiseKernelTest, NamesFollowTheSource) {
  const PointwiseSpec a =
      Spec(DType::kFloat32, 2, {Ins(FusedOpcode::kAdd, 2, 0, 1), Ins(FusedOpcode::kRelu, 3, 2)}, {3});
  PointwiseSpec b = a;
  b.program.code[0].alpha = 2.0;
  PointwiseSpec c = a;
  c.scalar[1] = true;
  PointwiseSpec d = a;
  d.dtype = DType::kFloat16;
  d.input_dtypes = {DType::kFloat16, DType::kFloat16};
  const GeneratedKernel ka = GeneratePointwiseKernel(a);
  EXPECT_EQ(ka.name, GeneratePointwiseKernel(a).name);
  EXPECT_EQ(ka.source, GeneratePointwiseKernel(a).source);
  EXPECT_THAT(ka.name, ::testing::StartsWith("tandem_pw_"));
  EXPECT_THAT(ka.source, HasSubstr(ka.name));
  for (const PointwiseSpec* other : {&b, &c, &d}) EXPECT_NE(GeneratePointwiseKernel(*other).name, ka.name);
  // alpha 1 is a plain add (fma(1, y, x) rounds as x + y); 2 is one fma.
  EXPECT_THAT(ka.source, HasSubstr("__fadd_rn(r0, r1)"));
  EXPECT_THAT(GeneratePointwiseKernel(b).source, HasSubstr("__fmaf_rn(__int_as_float(0x40000000), r1, r0)"));
  // A rank-0 input is read once, outside the loops, and not aligned-checked.
  EXPECT_THAT(GeneratePointwiseKernel(c).source, HasSubstr("const T s1 = "));
  EXPECT_THAT(GeneratePointwiseKernel(c).source, Not(HasSubstr("p.in[1])) |")));
}

// Every opcode, in every dtype, with rank-0 inputs of each float dtype in
// 16-bit programs, and a program at every limit: each source compiles.
TEST(GeneratePointwiseKernelTest, EveryOpcodeAndDTypeCompiles) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "this build has no NVRTC: generated kernels are not compiled here";
  std::vector<FusedInstruction> code;
  int dst = 3;
  for (FusedOpcode op : {FusedOpcode::kAdd, FusedOpcode::kSub, FusedOpcode::kMul, FusedOpcode::kDiv,
                         FusedOpcode::kAddScalar, FusedOpcode::kSubScalar, FusedOpcode::kMulScalar,
                         FusedOpcode::kDivScalar, FusedOpcode::kNeg, FusedOpcode::kSqrt, FusedOpcode::kMaximum,
                         FusedOpcode::kMinimum, FusedOpcode::kRelu, FusedOpcode::kThresholdBackward}) {
    code.push_back(Ins(op, dst, dst - 1, dst - 2, 0.5, 1.5));
    ++dst;
  }
  for (FusedInstruction& ins : code) {
    const bool reads_b = ins.op == FusedOpcode::kAdd || ins.op == FusedOpcode::kSub || ins.op == FusedOpcode::kMul ||
                         ins.op == FusedOpcode::kDiv || ins.op == FusedOpcode::kMaximum ||
                         ins.op == FusedOpcode::kMinimum || ins.op == FusedOpcode::kThresholdBackward;
    if (!reads_b) ins.b = -1;
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    PointwiseSpec spec = Spec(dtype, 3, code, {dst - 1, 5, 9});
    spec.scalar[1] = true;
    std::vector<DType> scalar_dtypes = {dtype};
    if (dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
      scalar_dtypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16};
    }
    for (DType scalar_dtype : scalar_dtypes) {
      spec.input_dtypes[1] = scalar_dtype;
      const GeneratedKernel kernel = GeneratePointwiseKernel(spec);
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " with a " << DTypeName(scalar_dtype) << " scalar\n"
                                        << kernel.source);
      absl::StatusOr<std::string> cubin = CompileKernel(kernel, 90);
      ASSERT_TRUE(cubin.ok()) << cubin.status();
      EXPECT_GT(cubin->size(), 1000u);
      // The CUBIN names the kernel (an ELF symbol of that name).
      EXPECT_NE(cubin->find(kernel.name), std::string::npos);
      EXPECT_NE(cubin->find(BatchEntryName(kernel)), std::string::npos);
    }
  }
  // The limits: 8 inputs, 32 instructions, 4 outputs.
  std::vector<FusedInstruction> longest;
  for (int i = 0; i < kFusedMaxInstructions; ++i) {
    longest.push_back(Ins(FusedOpcode::kAdd, kFusedMaxInputs + i, i % kFusedMaxInputs, (i + 3) % kFusedMaxInputs));
  }
  const PointwiseSpec widest = Spec(DType::kFloat32, kFusedMaxInputs, longest, {8, 20, 30, 39});
  absl::StatusOr<std::string> cubin = CompileKernel(GeneratePointwiseKernel(widest), 90);
  EXPECT_TRUE(cubin.ok()) << cubin.status();
}

// The fusion pass reuses registers once their values are dead, and the
// interpreter overwrites them in place. The generated code is single
// assignment: each step reads the latest value of its registers.
TEST(GeneratePointwiseKernelTest, RegistersWrittenTwiceReadTheirLatestValue) {
  const PointwiseSpec spec =
      Spec(DType::kFloat32, 2,
           {Ins(FusedOpcode::kAdd, 2, 0, 1), Ins(FusedOpcode::kMul, 3, 2, 0), Ins(FusedOpcode::kMaximum, 2, 3, 1),
            Ins(FusedOpcode::kMul, 3, 2, 2), Ins(FusedOpcode::kRelu, 0, 3)},
           {2, 0});
  const GeneratedKernel kernel = GeneratePointwiseKernel(spec);
  SCOPED_TRACE(kernel.source);
  EXPECT_THAT(kernel.source, HasSubstr("const T v0 = __fadd_rn(r0, r1);"));
  EXPECT_THAT(kernel.source, HasSubstr("const T v1 = __fmul_rn(v0, r0);"));
  EXPECT_THAT(kernel.source, HasSubstr("const T v2 = tandem_max(v1, r1);"));
  EXPECT_THAT(kernel.source, HasSubstr("const T v3 = __fmul_rn(v2, v2);"));
  EXPECT_THAT(kernel.source, HasSubstr("const T v4 = v3 < T(0) ? T(0) : v3;"));
  EXPECT_THAT(kernel.source, HasSubstr("out0 = v2;"));
  EXPECT_THAT(kernel.source, HasSubstr("out1 = v4;"));
  if (!NvrtcAvailable()) GTEST_SKIP() << "this build has no NVRTC: generated kernels are not compiled here";
  absl::StatusOr<std::string> cubin = CompileKernel(kernel, 90);
  EXPECT_TRUE(cubin.ok()) << cubin.status();
}

// From a graph through the fusion pass: a residual block's add + relu and
// the gradient's add + threshold_backward become one node, whose kernel
// the job's preparation generates and compiles once for its two alike
// nodes.
TEST(JobKernelsTest, AGraphsFusedNodesGetTheirKernels) {
  v1::Graph g;
  for (const char* name : {"x", "skip", "g1", "g2", "x2", "skip2"}) {
    testing::AddSpec(g.add_feeds(), name, v1::FLOAT32, {4, 8});
  }
  testing::AddNode(g, "add.Tensor", {"x", "skip"}, "s");
  testing::AddNode(g, "relu", {"s"}, "out");
  testing::AddNode(g, "add.Tensor", {"g1", "g2"}, "g");
  v1::Node* tb = testing::AddNode(g, "threshold_backward", {"g", "out"}, "gs");
  (*tb->mutable_attrs())["threshold"].set_f(0.0);
  testing::AddNode(g, "exp", {"gs"}, "e");  // not fusable: ends the first group
  testing::AddNode(g, "add.Tensor", {"x2", "skip2"}, "s2");
  testing::AddNode(g, "relu", {"s2"}, "out2");
  g.add_fetches("e");
  g.add_fetches("out2");
  absl::StatusOr<Graph> built = BuildGraph(g, testing::Persistent());
  ASSERT_TRUE(built.ok()) << built.status();
  absl::StatusOr<Graph> fused = FuseElementwise(*built);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::vector<std::pair<int, GeneratedKernel>> kernels = GenerateJobKernels(*fused);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_NE(kernels[0].second.name, kernels[1].second.name);  // 4 and 2 instructions
  EXPECT_THAT(kernels[0].second.source, HasSubstr(" > __int_as_float(0x00000000) ? "));
  if (!NvrtcAvailable()) GTEST_SKIP() << "this build has no NVRTC: generated kernels are not compiled here";
  KernelCache cache;
  JobKernelsReport report = PrepareJobKernels(*fused, {CompileTarget{90, 0}}, cache);
  EXPECT_EQ(report.nodes, 2);
  EXPECT_EQ(report.kernels, 2);
  EXPECT_EQ(report.compiled, 2);
  EXPECT_EQ(report.failed, 0) << report.first_error;
  report = PrepareJobKernels(*fused, {CompileTarget{90, 0}}, cache);
  EXPECT_EQ(report.compiled, 0);
  EXPECT_EQ(cache.counters().memory_hits, 2);
}

}  // namespace
}  // namespace tandem::codegen
