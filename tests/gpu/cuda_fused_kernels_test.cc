// The fused_elementwise CUDA kernels, generated (codegen/) and
// interpreting, against the CPU kernel (the oracle,
// itself bit-for-bit the unfused CPU ops: compiler/fuse_elementwise_test.cc),
// on fresh random inputs (the seed is printed): float32 and float64, rank-0
// operands, sizes that are and are not whole 16-byte vectors, in-place
// outputs, and pointers that are not 16-byte aligned. The fused kernel also
// matches the unfused CUDA kernels of the ops it replaces: bit for bit for
// the SGD step (alpha 1, where every op rounds once either way). Every
// check runs twice, with generated kernels and with the interpreter, and
// the two must agree bit for bit.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "codegen/job_kernels.h"
#include "codegen/pointwise_kernel.h"
#include "gtest/gtest.h"
#include "ir/ops/fused_program.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_program_options.h"
#include "kernels/cuda/generated_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr double kElementwise32 = 1e-5;
constexpr double kAny64 = 1e-12;

constexpr int64_t Op(FusedOpcode op) { return static_cast<int64_t>(op); }

Attrs FusedAttrs(std::vector<int64_t> code, std::vector<double> consts, std::vector<int64_t> outputs) {
  Attrs attrs;
  attrs.Set("code", std::move(code));
  attrs.Set("consts", std::move(consts));
  attrs.Set("outputs", std::move(outputs));
  return attrs;
}

// Inputs (buf, grad, lr, w): buf' = 0.9 * buf + grad; w' = w - buf' * lr.
Attrs SgdProgram() {
  using enum FusedOpcode;
  return FusedAttrs({Op(kMulScalar), 4, 0, 0, -1,  //
                     Op(kAdd),       5, 4, 1, -1,  //
                     Op(kMul),       6, 5, 2, -1,  //
                     Op(kSub),       7, 3, 6, -1},
                    {0.9}, {5, 7});
}

// Inputs (x, y > 0, z, s rank-0 > 0): every opcode, alphas other than 1.
Attrs EveryOpcodeProgram() {
  using enum FusedOpcode;
  return FusedAttrs({Op(kAdd),
                     4,
                     0,
                     1,
                     0,  // x + 0.75 y
                     Op(kSub),
                     5,
                     4,
                     2,
                     1,  // - 1.5 z
                     Op(kMul),
                     6,
                     5,
                     3,
                     -1,  // * s
                     Op(kDiv),
                     7,
                     6,
                     1,
                     -1,  // / y
                     Op(kAddScalar),
                     8,
                     7,
                     2,
                     3,  // + 0.5 * 2.5
                     Op(kSubScalar),
                     9,
                     8,
                     4,
                     5,  // - 3 * 1.25
                     Op(kMulScalar),
                     10,
                     9,
                     6,
                     -1,  // * -0.7
                     Op(kDivScalar),
                     11,
                     10,
                     7,
                     -1,  // / 1.3
                     Op(kNeg),
                     12,
                     11,
                     -1,
                     -1,  //
                     Op(kSqrt),
                     13,
                     1,
                     -1,
                     -1,  // sqrt(y)
                     Op(kAdd),
                     14,
                     12,
                     13,
                     -1,  //
                     Op(kRelu),
                     15,
                     5,
                     -1,
                     -1,  // of a value of either sign
                     Op(kThresholdBackward),
                     16,
                     15,
                     4,
                     8},  // r4 > 0.1 ? r15 : 0
                    {0.75, 1.5, 2.5, 0.5, 1.25, 3.0, -0.7, 1.3, 0.1}, {7, 14, 13, 16});
}

// Inputs x0..x6 and a rank-0 x7, all positive: 14 products x[j % 7] *
// x[(j + 1) % 7] kept live while a sum runs over them, then x0..x4 added:
// about 20 values live at once (the kernel's widest register file). Outputs:
// the sum, the first and the last product.
Attrs WideProgram() {
  using enum FusedOpcode;
  std::vector<int64_t> code;
  int next = 8;
  for (int j = 0; j < 14; ++j) code.insert(code.end(), {Op(kMul), next++, j % 7, (j + 1) % 7, -1});
  int sum = 8;
  for (int j = 1; j < 14; ++j) {
    code.insert(code.end(), {Op(kAdd), next, sum, 8 + j, -1});
    sum = next++;
  }
  for (int k = 0; k < 5; ++k) {
    code.insert(code.end(), {Op(kAdd), next, sum, k, 0});  // + 0.5 * x[k]
    sum = next++;
  }
  return FusedAttrs(std::move(code), {0.5}, {sum, 8, 21});
}

// A random program of positive values (every opcode but sub and neg, with
// positive constants; mul and div take an input as their second operand, so
// magnitudes stay within a factor of about 3 per instruction) over 1 to 8
// inputs, input 0 a tensor and each other one rank-0 with odds 1 in 4, with
// 1 to 32 instructions that write new registers or overwrite earlier
// results, and 1 to 4 outputs.
struct RandomProgram {
  Attrs attrs;
  std::vector<bool> rank0;
  int outputs = 0;
};

RandomProgram MakeRandomProgram(std::mt19937_64& rng) {
  using enum FusedOpcode;
  auto pick = [&](size_t n) { return static_cast<int>(std::uniform_int_distribution<size_t>(0, n - 1)(rng)); };
  std::uniform_real_distribution<double> positive(0.5, 2.0);
  RandomProgram program;
  const int inputs = 1 + pick(kFusedMaxInputs);
  program.rank0.push_back(false);
  for (int k = 1; k < inputs; ++k) program.rank0.push_back(pick(4) == 0);
  std::vector<int64_t> code;
  std::vector<double> consts;
  auto add_const = [&]() {
    consts.push_back(positive(rng));
    return static_cast<int64_t>(consts.size() - 1);
  };
  std::vector<int> readable;
  for (int k = 0; k < inputs; ++k) readable.push_back(k);
  std::vector<int> written;
  int next = inputs;
  const FusedOpcode opcodes[] = {kAdd, kMul, kDiv, kAddScalar, kMulScalar, kDivScalar, kSqrt};
  const int count = 1 + pick(kFusedMaxInstructions);
  for (int j = 0; j < count; ++j) {
    const FusedOpcode op = opcodes[pick(std::size(opcodes))];
    const int a = readable[pick(readable.size())];
    int64_t b = -1, k = -1;
    switch (op) {
      case kAdd:
        b = readable[pick(readable.size())];
        k = pick(2) == 0 ? -1 : add_const();
        break;
      case kMul:
      case kDiv:
        b = pick(inputs);
        break;
      case kAddScalar:
        b = add_const();
        k = pick(2) == 0 ? -1 : add_const();
        break;
      case kMulScalar:
      case kDivScalar:
        b = add_const();
        break;
      default:
        break;  // kSqrt
    }
    int dst;
    if (!written.empty() && pick(3) == 0) {
      dst = written[pick(written.size())];
    } else {
      dst = next++;
      written.push_back(dst);
      readable.push_back(dst);
    }
    code.insert(code.end(), {Op(op), dst, a, b, k});
  }
  std::shuffle(written.begin(), written.end(), rng);
  program.outputs = 1 + pick(std::min<size_t>(written.size(), kFusedMaxOutputs));
  std::vector<int64_t> outputs(written.begin(), written.begin() + program.outputs);
  program.attrs = FusedAttrs(std::move(code), std::move(consts), std::move(outputs));
  return program;
}

// Generated kernels on or off for one scope (on again after it).
class KernelMode {
 public:
  explicit KernelMode(bool generated) : trace_(__FILE__, __LINE__, generated ? "generated kernel" : "interpreter") {
    codegen::SetGeneratedKernelsEnabled(generated);
  }
  ~KernelMode() { codegen::SetGeneratedKernelsEnabled(true); }

 private:
  ::testing::ScopedTrace trace_;
};

// Feeds -> CPU oracle; feeds -> GPU (op by op, then graph replay), with
// generated kernels and with the interpreter; every node output compared
// with the oracle, and the two GPU runs with each other bit for bit.
// Returns the GPU's values of the last run with generated kernels.
std::vector<Bytes> CheckAgainstCpu(const GraphMaker& maker, std::vector<std::pair<int, int>> alias = {}) {
  const Graph& graph = maker.graph();
  const std::vector<Bytes> feeds = maker.RandomFeeds(Rng());
  auto ref = RunOnCpu(graph, feeds);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return {};
  std::vector<Bytes> by_mode[2];
  for (int mode = 0; mode < 2; ++mode) {
    KernelMode kernels(mode == 0);
    const int64_t launches = cuda::GeneratedKernelLaunchesForTesting();
    GpuRun run(graph, alias);
    auto program = cuda::CreateCudaProgram(graph, *Gpu(), cuda::CudaProgramOptions{});
    EXPECT_TRUE(program.ok()) << program.status();
    if (!program.ok()) return {};
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_TRUE(run.Upload(feeds).ok());
      const absl::Status status = run.RunIteration(**program);
      EXPECT_TRUE(status.ok()) << status;
      auto values = run.Download();
      EXPECT_TRUE(values.ok()) << values.status();
      if (!status.ok() || !values.ok()) return {};
      by_mode[mode] = *std::move(values);
      for (size_t i = 0; i < graph.nodes.size(); ++i) {
        for (int v : graph.nodes[i].outputs) {
          const TensorType& type = graph.values[v].type;
          EXPECT_TRUE(
              Matches(by_mode[mode][v], (*ref)[v], type, type.dtype == DType::kFloat64 ? kAny64 : kElementwise32))
              << graph.nodes[i].Describe(static_cast<int>(i)) << " output " << type.ToString()
              << (pass == 0 ? " (op by op)" : " (graph replay)");
        }
      }
    }
    // The generated kernels ran (op by op and in the capture), or not at all.
    if (mode == 0) {
      EXPECT_GT(cuda::GeneratedKernelLaunchesForTesting(), launches);
    } else {
      EXPECT_EQ(cuda::GeneratedKernelLaunchesForTesting(), launches);
    }
  }
  for (const Node& node : graph.nodes) {
    for (int v : node.outputs) EXPECT_TRUE(SameBytes(by_mode[0][v], by_mode[1][v])) << "generated vs interpreter";
  }
  return by_mode[0];
}

// Element counts: one element, less than a vector, whole vectors, and
// whole vectors plus a tail, small and large.
const std::vector<int64_t> kSizes = {1, 3, 8, 1000, 4099, 1 << 18, (1 << 20) + 5};

TEST(CudaFusedKernels, SgdStepMatchesCpuAndTheUnfusedKernelsExactly) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << "]");
      GraphMaker g;
      const int buf = g.Feed({dtype, {n}});
      const int grad = g.Feed({dtype, {n}});
      const int lr = g.Feed({dtype, {}}, Fill::kPositive);
      const int w = g.Feed({dtype, {n}});
      const std::vector<int> fused = g.Add("fused_elementwise", {buf, grad, lr, w}, SgdProgram());
      ASSERT_EQ(fused.size(), 2u);
      // The same step unfused.
      const int m = g.Add1("mul.Scalar", {buf}, MakeAttrs({{"other", 0.9}}));
      const int buf_new = g.Add1("add.Tensor", {m, grad});
      const int step = g.Add1("mul.Tensor", {buf_new, lr});
      const int w_new = g.Add1("sub.Tensor", {w, step});
      const std::vector<Bytes> out = CheckAgainstCpu(g);
      ASSERT_FALSE(out.empty());
      EXPECT_TRUE(SameBytes(out[fused[0]], out[buf_new])) << "momentum buffer";
      EXPECT_TRUE(SameBytes(out[fused[1]], out[w_new])) << "parameter";
    }
  }
}

// An optimizer step over many parameters of assorted sizes, each buffer
// updated in place: alike independent nodes run as batched launches
// (codegen/pointwise_batches.h), more nodes than one batch takes, with the
// same bits as the interpreter's one launch per node.
TEST(CudaFusedKernels, AnOptimizerStepRunsInBatches) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    GraphMaker g;
    const int lr = g.Feed({dtype, {}}, Fill::kPositive);
    std::vector<std::pair<int, int>> alias;
    const int params = codegen::kPointwiseBatchMax + 9;
    for (int p = 0; p < params; ++p) {
      const int64_t n = kSizes[p % kSizes.size()] + p;
      const int buf = g.Feed({dtype, {n}});
      const int grad = g.Feed({dtype, {n}});
      const int w = g.Feed({dtype, {n}});
      const std::vector<int> fused = g.Add("fused_elementwise", {buf, grad, lr, w}, SgdProgram());
      ASSERT_EQ(fused.size(), 2u);
      alias.emplace_back(fused[0], buf);
    }
    const int64_t segments = cuda::GeneratedBatchSegmentsForTesting();
    CheckAgainstCpu(g, alias);
    // Op by op, then the capture (then replays): every node each time, in
    // batches.
    const int64_t batched = cuda::GeneratedBatchSegmentsForTesting() - segments;
    EXPECT_GE(batched, 2 * params);
    EXPECT_EQ(batched % params, 0);
  }
}

TEST(CudaFusedKernels, EveryOpcodeWithRankZeroOperandMatchesCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << "]");
      GraphMaker g;
      const int x = g.Feed({dtype, {n}});
      const int y = g.Feed({dtype, {n}}, Fill::kPositive);
      const int z = g.Feed({dtype, {n}}, Fill::kNonZero);
      const int s = g.Feed({dtype, {}}, Fill::kPositive);
      ASSERT_EQ(g.Add("fused_elementwise", {x, y, z, s}, EveryOpcodeProgram()).size(), 4u);
      CheckAgainstCpu(g);
    }
  }
}

TEST(CudaFusedKernels, RankZeroOnlyAndMatrixShapes) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : std::vector<Shape>{{}, {7, 9}, {3, 5, 33}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << ShapeString(shape));
      GraphMaker g;
      const int buf = g.Feed({dtype, shape});
      const int grad = g.Feed({dtype, shape});
      const int lr = g.Feed({dtype, {}}, Fill::kPositive);
      const int w = g.Feed({dtype, shape});
      const std::vector<int> fused = g.Add("fused_elementwise", {buf, grad, lr, w}, SgdProgram());
      ASSERT_EQ(fused.size(), 2u);
      EXPECT_EQ(g.type(fused[1]).shape, shape);
      CheckAgainstCpu(g);
    }
  }
}

// Output 0 on input 0's buffer, as the planner places it (AliasKind::kInPlace).
TEST(CudaFusedKernels, InPlaceOutputMatchesCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : {int64_t{5}, int64_t{4099}, int64_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << "]");
      GraphMaker g;
      const int buf = g.Feed({dtype, {n}});
      const int grad = g.Feed({dtype, {n}});
      const int lr = g.Feed({dtype, {}}, Fill::kPositive);
      const int w = g.Feed({dtype, {n}});
      const std::vector<int> fused = g.Add("fused_elementwise", {buf, grad, lr, w}, SgdProgram());
      ASSERT_EQ(fused.size(), 2u);
      CheckAgainstCpu(g, {{fused[0], buf}});
    }
  }
}

// Runs the CUDA kernel directly on buffers one element past a 256-byte
// boundary (not 16-byte aligned: the one-element path), against the CPU
// kernel on the same inputs.
template <typename T>
void CheckUnaligned(DType dtype, int64_t n, const Attrs& attrs, const std::vector<bool>& rank0, int outputs) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " [" << n << "] unaligned");
  Node node;
  node.op = kFusedElementwiseOp;
  node.def = OpRegistry::Global().Find(node.op);
  node.attrs = attrs;
  std::uniform_real_distribution<double> positive(0.5, 2.0);
  std::vector<std::vector<T>> host_in(rank0.size()), cpu_out(outputs), gpu_out(outputs);
  KernelArgs cpu_args, gpu_args;
  cpu_args.node = gpu_args.node = &node;
  std::vector<void*> allocations;
  auto device_buffer = [&](int64_t count) -> T* {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, (count + 1) * sizeof(T)), cudaSuccess);
    allocations.push_back(p);
    return static_cast<T*>(p) + 1;
  };
  for (size_t k = 0; k < rank0.size(); ++k) {
    const TensorType type{dtype, rank0[k] ? Shape{} : Shape{n}};
    host_in[k].resize(type.numel());
    for (T& v : host_in[k]) v = static_cast<T>(positive(Rng()));
    cpu_args.inputs.push_back({host_in[k].data(), type});
    T* d = device_buffer(type.numel());
    ASSERT_EQ(cudaMemcpy(d, host_in[k].data(), type.numel() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    gpu_args.inputs.push_back({d, type});
  }
  for (int o = 0; o < outputs; ++o) {
    const TensorType type{dtype, {n}};
    cpu_out[o].assign(n, T(0));
    cpu_args.outputs.push_back({cpu_out[o].data(), type});
    T* d = device_buffer(n);
    ASSERT_EQ(cudaMemset(d, 0xFF, n * sizeof(T)), cudaSuccess);  // poison: unwritten outputs show
    gpu_args.outputs.push_back({d, type});
  }
  const cpu::CpuKernelFn cpu_kernel = cpu::FindCpuKernel(kFusedElementwiseOp);
  const cuda::CudaKernelFn cuda_kernel = cuda::FindCudaKernel(kFusedElementwiseOp);
  ASSERT_NE(cpu_kernel, nullptr);
  ASSERT_NE(cuda_kernel, nullptr);
  ASSERT_TRUE(cpu_kernel(cpu_args).ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::CudaKernelContext context;
  context.native = stream;
  std::vector<Bytes> by_mode[2];
  for (int mode = 0; mode < 2; ++mode) {
    KernelMode kernels(mode == 0);
    for (const TensorArg& out : gpu_args.outputs) ASSERT_EQ(cudaMemset(out.data, 0xFF, n * sizeof(T)), cudaSuccess);
    const absl::Status launched = cuda_kernel(context, gpu_args);
    EXPECT_TRUE(launched.ok()) << launched;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (int o = 0; o < outputs; ++o) {
      Bytes got(n * sizeof(T)), want(n * sizeof(T));
      ASSERT_EQ(cudaMemcpy(got.data(), gpu_args.outputs[o].data, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      std::memcpy(want.data(), cpu_out[o].data(), want.size());
      EXPECT_TRUE(Matches(got, want, {dtype, {n}}, dtype == DType::kFloat64 ? kAny64 : kElementwise32))
          << "output " << o;
      by_mode[mode].push_back(std::move(got));
    }
  }
  for (int o = 0; o < outputs; ++o) EXPECT_TRUE(SameBytes(by_mode[0][o], by_mode[1][o])) << "output " << o;
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  for (void* p : allocations) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(CudaFusedKernels, UnalignedBuffersMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{300001}}) {
    CheckUnaligned<float>(DType::kFloat32, n, SgdProgram(), {false, false, true, false}, 2);
    CheckUnaligned<double>(DType::kFloat64, n, SgdProgram(), {false, false, true, false}, 2);
    CheckUnaligned<float>(DType::kFloat32, n, EveryOpcodeProgram(), {false, false, false, true}, 4);
    CheckUnaligned<double>(DType::kFloat64, n, EveryOpcodeProgram(), {false, false, false, true}, 4);
  }
}

// Programs of every length, input count and register pattern: random
// programs (fresh each run; the seed is printed) against the CPU, through
// graphs and on unaligned buffers, and the widest register file.
TEST(CudaFusedKernels, RandomProgramsMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int trial = 0; trial < 24; ++trial) {
    const RandomProgram program = MakeRandomProgram(Rng());
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, (int64_t{1} << 18) + 3}) {
        SCOPED_TRACE(::testing::Message() << "program " << trial << " " << DTypeName(dtype) << " [" << n << "] "
                                          << program.rank0.size() << " inputs");
        GraphMaker g;
        std::vector<int> inputs;
        for (bool rank0 : program.rank0) inputs.push_back(g.Feed({dtype, rank0 ? Shape{} : Shape{n}}, Fill::kPositive));
        ASSERT_EQ(g.Add("fused_elementwise", inputs, program.attrs).size(), static_cast<size_t>(program.outputs));
        CheckAgainstCpu(g);
      }
    }
    for (int64_t n : {int64_t{7}, int64_t{4097}}) {
      CheckUnaligned<float>(DType::kFloat32, n, program.attrs, program.rank0, program.outputs);
      CheckUnaligned<double>(DType::kFloat64, n, program.attrs, program.rank0, program.outputs);
    }
  }
  const std::vector<bool> rank0 = {false, false, false, false, false, false, false, true};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : {int64_t{5}, int64_t{4099}, int64_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << "wide program " << DTypeName(dtype) << " [" << n << "]");
      GraphMaker g;
      std::vector<int> inputs;
      for (bool r : rank0) inputs.push_back(g.Feed({dtype, r ? Shape{} : Shape{n}}, Fill::kPositive));
      ASSERT_EQ(g.Add("fused_elementwise", inputs, WideProgram()).size(), 3u);
      CheckAgainstCpu(g);
    }
  }
  CheckUnaligned<float>(DType::kFloat32, 4097, WideProgram(), rank0, 3);
}

}  // namespace
}  // namespace tandem::gpu_test
