// The bfloat16 / float16 CUDA kernels of a 16-bit model's optimizer step:
// sqrt, maximum, minimum, clamp, addcmul, addcdiv, the comparisons and
// where.self (half_elementwise_kernels.cu), masked_fill, logical_not and any
// (comparison_kernels.cu), and 16-bit fused_elementwise
// programs (fused_kernels.cu), against the CPU kernels (the oracle) in both
// 16-bit types, on fresh random inputs and shapes (the seed is printed).
// Each graph runs twice on the GPU, op by op and as a replay of the captured
// CUDA graph; outputs are poisoned (0xFF bytes: NaN) before each run and NaN
// never passes.
//
// What must match exactly: selections and comparisons (maximum, minimum,
// clamp, where, masked_fill, every comparison, logical_not, any) and sqrt (IEEE-rounded on both backends)
// are bit for bit the CPU's; a fused program is bit for bit the unfused
// CUDA ops it stands for, run in the same graph (both compute each op in
// float32 with the same contractions and round it to 16 bits where the op
// stores), as it is on the CPU. Within tolerance: addcmul (a fused
// multiply-add on the GPU, two roundings on the CPU), addcdiv, and fused or
// unfused chains against the CPU (add/sub with alpha != 1 is one FMA on the
// GPU): such a difference moves a 16-bit result by one ulp at most per op
// (2u relative per element, u = 2^-8 for bfloat16, 2^-11 for float16), so a
// single op's normwise tolerance is 2u + 1e-3 and a chain's 8u.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_registry.h"
#include "ir/ops/fused_program.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::gpu_test {
namespace {

constexpr int64_t Op(FusedOpcode op) { return static_cast<int64_t>(op); }

double UnitRoundoff(DType dtype) { return dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }
double OpTolerance(DType dtype) { return 2 * UnitRoundoff(dtype) + 1e-3; }
double ChainTolerance(DType dtype) { return 8 * UnitRoundoff(dtype); }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

int64_t Dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(Rng()); }

float HalfAt(const Bytes& b, DType dtype, size_t i) {
  uint16_t bits;
  std::memcpy(&bits, b.data() + 2 * i, 2);
  return dtype == DType::kBFloat16 ? BFloat16BitsToFloat(bits) : Float16BitsToFloat(bits);
}

// 16-bit `out` against `ref`: no NaN (a poisoned, unwritten element is
// NaN), infinities only where the reference has the same one (a long
// float16 chain may overflow on both backends), and the finite elements
// within `tolerance`, normwise relative.
::testing::AssertionResult CloseHalf(const Bytes& out, const Bytes& ref, DType dtype, double tolerance) {
  if (out.size() != ref.size()) return ::testing::AssertionFailure() << "sizes differ";
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out.size() / 2; ++i) {
    const float o = HalfAt(out, dtype, i), r = HalfAt(ref, dtype, i);
    if (std::isnan(o)) return ::testing::AssertionFailure() << "element " << i << " is NaN; reference " << r;
    if (std::isinf(o) || std::isinf(r)) {
      if (o != r) return ::testing::AssertionFailure() << "element " << i << ": " << o << " vs " << r;
      continue;
    }
    diff += (static_cast<double>(o) - r) * (static_cast<double>(o) - r);
    norm += static_cast<double>(r) * r;
  }
  const double error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (error <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << error << " > " << tolerance;
}

// Every value's bytes after a CompareWithCpu run: the CPU oracle's and the
// GPU's of both runs (op by op, graph replay).
struct RunValues {
  std::map<int, Bytes> cpu;
  std::map<int, Bytes> gpu[2];
};

// CompareWithCpu over `maker`'s graph: each node output of a 16-bit type is
// compared with the CPU's within tolerance_of(value), or bit for bit where
// that is 0 (and without NaN); other dtypes (bools) bit for bit.
RunValues CheckAgainstCpu(const GraphMaker& maker, const std::function<double(int)>& tolerance_of,
                          std::vector<std::pair<int, int>> alias = {}) {
  RunValues values;
  CompareWithCpu(
      maker,
      [&](const OutputPair& o) {
        const DType dtype = o.type().dtype;
        if (IsHalf(dtype)) {
          const double tolerance = tolerance_of(o.value);
          EXPECT_TRUE(CloseHalf(*o.gpu, *o.ref, dtype, tolerance)) << o.Where();
          if (tolerance == 0.0) {
            EXPECT_TRUE(SameBytes(*o.gpu, *o.ref)) << o.Where();
          }
        } else {
          EXPECT_TRUE(Matches(*o.gpu, *o.ref, o.type(), 0.0)) << o.Where();
        }
        values.cpu[o.value] = *o.ref;
        values.gpu[o.replay ? 1 : 0][o.value] = *o.gpu;
      },
      std::move(alias));
  return values;
}

// The unfused ops of a fused program (the fusion pass's inverse), reading
// `inputs` (value ids by input register); returns the value ids of the
// program's outputs.
std::vector<int> AddUnfused(GraphMaker& g, const std::vector<int64_t>& code, const std::vector<double>& consts,
                            const std::vector<int64_t>& outputs, const std::vector<int>& inputs) {
  std::map<int64_t, int> value_of;
  for (size_t k = 0; k < inputs.size(); ++k) value_of[static_cast<int64_t>(k)] = inputs[k];
  for (size_t j = 0; j + kFusedFieldsPerInstruction <= code.size(); j += kFusedFieldsPerInstruction) {
    const auto op = static_cast<FusedOpcode>(code[j]);
    const int64_t dst = code[j + 1], a = code[j + 2], b = code[j + 3], k = code[j + 4];
    Attrs attrs;
    std::vector<int> in = {value_of.at(a)};
    switch (op) {
      case FusedOpcode::kAdd:
      case FusedOpcode::kSub:
        in.push_back(value_of.at(b));
        if (k >= 0) attrs.Set("alpha", consts[k]);
        break;
      case FusedOpcode::kMul:
      case FusedOpcode::kDiv:
      case FusedOpcode::kMaximum:
      case FusedOpcode::kMinimum:
        in.push_back(value_of.at(b));
        break;
      case FusedOpcode::kAddScalar:
      case FusedOpcode::kSubScalar:
        attrs.Set("other", consts[b]);
        if (k >= 0) attrs.Set("alpha", consts[k]);
        break;
      case FusedOpcode::kMulScalar:
      case FusedOpcode::kDivScalar:
        attrs.Set("other", consts[b]);
        break;
      case FusedOpcode::kNeg:
      case FusedOpcode::kSqrt:
      case FusedOpcode::kRelu:
        break;
      case FusedOpcode::kThresholdBackward:
        in.push_back(value_of.at(b));
        attrs.Set("threshold", consts[k]);
        break;
    }
    value_of[dst] = g.Add1(FusedOpcodeOpName(op), in, attrs);
  }
  std::vector<int> out;
  for (int64_t r : outputs) out.push_back(value_of.at(r));
  return out;
}

struct Program {
  std::vector<int64_t> code;
  std::vector<double> consts;
  std::vector<int64_t> outputs;

  Attrs attrs() const {
    Attrs a;
    a.Set("code", code);
    a.Set("consts", consts);
    a.Set("outputs", outputs);
    return a;
  }
};

// Adam(W) with amsgrad on one 16-bit parameter, as the PyTorch adaptor
// lowers it. Inputs: p, decay (float32 rank 0), exp_avg, grad, exp_avg_sq
// (>= 0), max_exp_avg_sq (>= 0), bias_correction2_sqrt and step_size
// (float32 rank 0). Outputs: exp_avg', exp_avg_sq', max', p'.
Program AdamProgram() {
  using enum FusedOpcode;
  return Program{{Op(kMul),       8,  0,  1,  -1,   // p * decay
                  Op(kMulScalar), 9,  2,  0,  -1,   // exp_avg * beta1
                  Op(kAdd),       10, 9,  3,  1,    // + (1 - beta1) grad
                  Op(kMulScalar), 11, 4,  2,  -1,   // exp_avg_sq * beta2
                  Op(kMulScalar), 12, 3,  3,  -1,   // (1 - beta2) grad
                  Op(kMul),       13, 12, 3,  -1,   // * grad
                  Op(kAdd),       14, 11, 13, -1,   // exp_avg_sq'
                  Op(kMaximum),   15, 5,  14, -1,   // max'
                  Op(kSqrt),      16, 15, -1, -1,   //
                  Op(kDiv),       17, 16, 6,  -1,   // / bias_correction2_sqrt
                  Op(kAddScalar), 18, 17, 4,  -1,   // + eps
                  Op(kMul),       19, 7,  10, -1,   // step_size * exp_avg'
                  Op(kDiv),       20, 19, 18, -1,   //
                  Op(kSub),       21, 8,  20, -1},  // p'
                 {0.9, 0.1, 0.999, 0.001, 1e-8},
                 {10, 14, 15, 21}};
}

// SGD with momentum; alpha is 1 everywhere, so every op rounds once on both
// backends. Inputs: buf, grad, lr (float32 rank 0), w.
Program SgdProgram() {
  using enum FusedOpcode;
  return Program{{Op(kMulScalar), 4, 0, 0, -1, Op(kAdd), 5, 4, 1, -1, Op(kMul), 6, 5, 2, -1, Op(kSub), 7, 3, 6, -1},
                 {0.9},
                 {5, 7}};
}

// A random program of positive values over 1 to 8 inputs (input 0 of rank
// > 0; each other one rank 0 with odds 1 in 3, of a random float dtype):
// every opcode but sub and neg, with positive constants; an instruction's
// first operand is never a rank-0 input (as in the programs the fusion pass
// writes, where each op has a tensor operand of the program's type).
struct RandomProgram {
  Program program;
  std::vector<TensorType> inputs;
};

RandomProgram MakeRandomProgram(DType dtype, int64_t n, std::mt19937_64& rng) {
  using enum FusedOpcode;
  auto pick = [&](size_t count) { return static_cast<int>(std::uniform_int_distribution<size_t>(0, count - 1)(rng)); };
  std::uniform_real_distribution<double> positive(0.5, 2.0);
  const DType scalar_types[] = {DType::kFloat32, DType::kFloat64, dtype};
  RandomProgram r;
  const int inputs = 1 + pick(kFusedMaxInputs);
  std::vector<int> shaped = {0}, any = {0};
  r.inputs.push_back({dtype, {n}});
  for (int k = 1; k < inputs; ++k) {
    const bool rank0 = pick(3) == 0;
    r.inputs.push_back(rank0 ? TensorType{scalar_types[pick(3)], {}} : TensorType{dtype, {n}});
    any.push_back(k);
    if (!rank0) shaped.push_back(k);
  }
  auto add_const = [&]() {
    r.program.consts.push_back(positive(rng));
    return static_cast<int64_t>(r.program.consts.size() - 1);
  };
  std::vector<int> written;
  int next = inputs;
  const FusedOpcode opcodes[] = {kAdd, kMul, kDiv, kAddScalar, kMulScalar, kDivScalar, kSqrt, kMaximum, kMinimum};
  const int count = 1 + pick(kFusedMaxInstructions);
  for (int j = 0; j < count; ++j) {
    const FusedOpcode op = opcodes[pick(std::size(opcodes))];
    const int a = shaped[pick(shaped.size())];
    int64_t b = -1, k = -1;
    switch (op) {
      case kAdd:
        b = any[pick(any.size())];
        k = pick(2) == 0 ? -1 : add_const();
        break;
      case kMul:
      case kDiv:
        b = pick(inputs);
        break;  // an input: magnitudes grow by at most 2 per instruction
      case kMaximum:
      case kMinimum:
        b = any[pick(any.size())];
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
      shaped.push_back(dst);
      any.push_back(dst);
    }
    r.program.code.insert(r.program.code.end(), {Op(op), dst, a, b, k});
  }
  std::shuffle(written.begin(), written.end(), rng);
  const int outputs = 1 + pick(std::min<size_t>(written.size(), kFusedMaxOutputs));
  r.program.outputs.assign(written.begin(), written.begin() + outputs);
  return r;
}

// A fused node and its unfused ops in one graph: fused == unfused bit for
// bit on the GPU (both runs) and on the CPU; each against the CPU within
// `tolerance` (0: bit for bit).
void CheckFusedAgainstUnfused(const std::vector<TensorType>& input_types, const std::vector<Fill>& fills,
                              const Program& program, double tolerance) {
  GraphMaker g;
  std::vector<int> inputs;
  for (size_t k = 0; k < input_types.size(); ++k) inputs.push_back(g.Feed(input_types[k], fills[k]));
  const std::vector<int> fused = g.Add(kFusedElementwiseOp, inputs, program.attrs());
  ASSERT_EQ(fused.size(), program.outputs.size());
  const std::vector<int> unfused = AddUnfused(g, program.code, program.consts, program.outputs, inputs);
  const RunValues values = CheckAgainstCpu(g, [&](int) { return tolerance; });
  for (size_t o = 0; o < fused.size(); ++o) {
    SCOPED_TRACE(::testing::Message() << "output " << o);
    EXPECT_TRUE(SameBytes(values.cpu.at(fused[o]), values.cpu.at(unfused[o]))) << "CPU: fused vs unfused";
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_TRUE(SameBytes(values.gpu[pass].at(fused[o]), values.gpu[pass].at(unfused[o])))
          << "GPU " << (pass == 0 ? "op by op" : "graph replay") << ": fused vs unfused";
    }
  }
}

class CudaHalfUpdate : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
};

TEST_P(CudaHalfUpdate, NewOpsMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t rows = Dim(1, 200), cols = Dim(1, 300);
  SCOPED_TRACE(::testing::Message() << "[" << rows << ", " << cols << "]");
  const DType h = dtype();
  GraphMaker g;
  const int x = g.Feed({h, {rows, cols}});
  const int y = g.Feed({h, {cols}});
  const int pos = g.Feed({h, {rows, cols}}, Fill::kPositive);
  const int nz = g.Feed({h, {rows, 1}}, Fill::kNonZero);
  const int s = g.Feed({DType::kFloat32, {}});
  const int cond = g.Feed({DType::kBool, {rows, cols}});
  std::vector<int> approximate;  // values compared within OpTolerance
  g.Add1("sqrt", {pos});
  const int m = g.Add1("maximum", {x, y});
  g.Add1("minimum", {x, y});
  g.Add1("maximum", {x, s});
  g.Add1("minimum", {s, x});
  g.Add1("clamp", {x}, MakeAttrs({{"min", -0.3}, {"max", 0.45}}));
  const int clamped = g.Add1("clamp", {x}, MakeAttrs({{"min", 0.1}}));
  g.Add1("clamp", {x}, MakeAttrs({{"max", int64_t{0}}}));
  g.Add1("clamp", {x}, MakeAttrs({{"min", 0.5}, {"max", -0.5}}));
  approximate.push_back(g.Add1("addcmul", {x, y, nz}, MakeAttrs({{"value", 1.0035}})));
  approximate.push_back(g.Add1("addcmul", {x, s, y}, MakeAttrs({{"value", -0.5}})));
  approximate.push_back(g.Add1("addcdiv", {x, y, nz}, MakeAttrs({{"value", 0.37}})));
  // Comparisons (ties: x against max(x, y)), with a float32 rank-0 operand
  // and a .Scalar number (rounded to the 16-bit type).
  g.Add1("eq.Tensor", {x, m});
  g.Add1("ne.Tensor", {m, x});
  g.Add1("lt.Tensor", {x, y});
  g.Add1("le.Tensor", {m, x});
  g.Add1("gt.Tensor", {x, s});
  g.Add1("ge.Tensor", {s, x});
  g.Add1("gt.Scalar", {x}, MakeAttrs({{"other", 0.1}}));
  g.Add1("le.Scalar", {x}, MakeAttrs({{"other", -0.3}}));
  g.Add1("eq.Scalar", {clamped}, MakeAttrs({{"other", 0.1}}));  // true where clamped to 0.1's 16-bit value
  g.Add1("where.self", {cond, x, y});
  g.Add1("where.self", {cond, s, x});
  const int scalar_cond = g.Feed({DType::kBool, {}});
  g.Add1("where.self", {scalar_cond, y, x});
  // masked_fill (a number and a float32 rank-0 value, both rounded to the
  // 16-bit type; a 16-bit rank-0 value copied), logical_not and any over
  // values with many zeros (clamp to [0, max]) and a tensor of zeros only.
  g.Add1("masked_fill.Scalar", {x, cond}, MakeAttrs({{"value", 0.1}}));
  g.Add1("masked_fill.Tensor", {y, scalar_cond, s});
  const int h0 = g.Add1("_to_copy", {s}, MakeAttrs({{"dtype", h}}));
  g.Add1("masked_fill.Tensor", {x, cond, h0});
  const int zeros = g.Add1("clamp", {x}, MakeAttrs({{"min", 0.0}}));
  const int all_zero = g.Add1("clamp", {x}, MakeAttrs({{"min", 0.0}, {"max", 0.0}}));
  g.Add1("logical_not", {zeros});
  g.Add1("any.dim", {zeros}, MakeAttrs({{"dim", int64_t{1}}}));
  g.Add1("any.dim", {zeros}, MakeAttrs({{"dim", int64_t{0}}, {"keepdim", true}}));
  g.Add1("any", {all_zero});
  g.Add1("any", {x});
  CheckAgainstCpu(g, [&](int v) {
    for (int a : approximate) {
      if (a == v) return OpTolerance(h);
    }
    return 0.0;
  });
}

// Output on its input's buffer, as the planner places these in-place ops.
TEST_P(CudaHalfUpdate, InPlaceOpsMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int64_t n = Dim(1, 100000);
  const DType h = dtype();
  GraphMaker g;
  const int pos = g.Feed({h, {n}}, Fill::kPositive);
  const int x = g.Feed({h, {n}});
  const int y = g.Feed({h, {n}});
  const int self = g.Feed({h, {n}});
  const int t1 = g.Feed({h, {n}});
  const int t2 = g.Feed({h, {n}}, Fill::kNonZero);
  const int root = g.Add1("sqrt", {pos});
  const int max = g.Add1("maximum", {x, y});
  const int addc = g.Add1("addcdiv", {self, t1, t2}, MakeAttrs({{"value", 0.25}}));
  CheckAgainstCpu(g, [&](int v) { return v == addc ? OpTolerance(h) : 0.0; }, {{root, pos}, {max, x}, {addc, self}});
}

TEST_P(CudaHalfUpdate, FusedStepsMatchTheUnfusedOpsBitForBit) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType h = dtype();
  const TensorType f32_scalar{DType::kFloat32, {}};
  for (int64_t n :
       {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{1000}, int64_t{4099}, int64_t{1} << 18, (int64_t{1} << 20) + 5}) {
    SCOPED_TRACE(::testing::Message() << "[" << n << "]");
    const TensorType t{h, {n}};
    {
      SCOPED_TRACE("adam");
      CheckFusedAgainstUnfused({t, f32_scalar, t, t, t, t, f32_scalar, f32_scalar},
                               {Fill::kUniform, Fill::kPositive, Fill::kUniform, Fill::kUniform, Fill::kPositive,
                                Fill::kPositive, Fill::kPositive, Fill::kPositive},
                               AdamProgram(), ChainTolerance(h));
    }
    {
      // Every op rounds once on both backends: fused GPU == CPU too.
      SCOPED_TRACE("sgd");
      CheckFusedAgainstUnfused({t, t, f32_scalar, t}, {Fill::kUniform, Fill::kUniform, Fill::kPositive, Fill::kUniform},
                               SgdProgram(), 0.0);
    }
  }
  // Matrix and rank-0 shapes.
  for (const Shape& shape : std::vector<Shape>{{7, 9}, {3, 5, 33}}) {
    SCOPED_TRACE(ShapeString(shape));
    const TensorType t{h, shape};
    CheckFusedAgainstUnfused({t, t, f32_scalar, t}, {Fill::kUniform, Fill::kUniform, Fill::kPositive, Fill::kUniform},
                             SgdProgram(), 0.0);
  }
}

TEST_P(CudaHalfUpdate, RandomFusedProgramsMatchTheUnfusedOps) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int trial = 0; trial < 16; ++trial) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, (int64_t{1} << 18) + 3}) {
      const RandomProgram r = MakeRandomProgram(dtype(), n, Rng());
      SCOPED_TRACE(::testing::Message() << "program " << trial << " [" << n << "] " << r.inputs.size() << " inputs, "
                                        << r.program.code.size() / kFusedFieldsPerInstruction << " instructions");
      CheckFusedAgainstUnfused(r.inputs, std::vector<Fill>(r.inputs.size(), Fill::kPositive), r.program,
                               ChainTolerance(dtype()));
      if (HasFatalFailure()) return;
    }
  }
}

// The fused kernel run directly on 16-bit buffers one element past a
// 256-byte boundary (not 8-byte aligned: the one-element path) and on
// aligned ones (whole packs), in place on input 0's buffer too: the three
// agree bit for bit, and with the CPU kernel within tolerance.
TEST_P(CudaHalfUpdate, FusedKernelUnalignedAndInPlace) {
  TANDEM_SKIP_WITHOUT_GPU();
  const DType h = dtype();
  const Program program = AdamProgram();
  Node node;
  node.op = kFusedElementwiseOp;
  node.def = OpRegistry::Global().Find(node.op);
  node.attrs = program.attrs();
  const std::vector<bool> rank0 = {false, true, false, false, false, false, true, true};
  const std::vector<Fill> fills = {Fill::kUniform,  Fill::kPositive, Fill::kUniform,  Fill::kUniform,
                                   Fill::kPositive, Fill::kPositive, Fill::kPositive, Fill::kPositive};
  const int outputs = static_cast<int>(program.outputs.size());
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{300001}}) {
    SCOPED_TRACE(::testing::Message() << "[" << n << "]");
    // Host inputs: 16-bit tensors, float32 scalars.
    std::vector<Bytes> host(rank0.size());
    std::vector<TensorType> types;
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    for (size_t k = 0; k < rank0.size(); ++k) {
      types.push_back(rank0[k] ? TensorType{DType::kFloat32, {}} : TensorType{h, {n}});
      host[k].resize(types[k].bytes());
      for (int64_t i = 0; i < types[k].numel(); ++i) {
        const double u = unit(Rng());
        const double v = fills[k] == Fill::kPositive ? 1.25 + 0.75 * u : u;
        if (rank0[k]) {
          const float f = static_cast<float>(v);
          std::memcpy(host[k].data(), &f, 4);
        } else {
          const uint16_t bits = h == DType::kBFloat16 ? BFloat16(v).bits : Float16(v).bits;
          std::memcpy(host[k].data() + 2 * i, &bits, 2);
        }
      }
    }
    // CPU reference.
    std::vector<Bytes> cpu_out(outputs, Bytes(n * 2));
    KernelArgs cpu_args;
    cpu_args.node = &node;
    for (size_t k = 0; k < rank0.size(); ++k) cpu_args.inputs.push_back({host[k].data(), types[k]});
    for (int o = 0; o < outputs; ++o) cpu_args.outputs.push_back({cpu_out[o].data(), {h, {n}}});
    const cpu::CpuKernelFn cpu_kernel = cpu::FindCpuKernel(kFusedElementwiseOp);
    ASSERT_NE(cpu_kernel, nullptr);
    ASSERT_TRUE(cpu_kernel(cpu_args).ok());
    // Three GPU runs: offset 0 (aligned), offset 1 element (unaligned), and
    // aligned with output 0 on input 0's buffer.
    const cuda::CudaKernelFn cuda_kernel = cuda::FindCudaKernel(kFusedElementwiseOp);
    ASSERT_NE(cuda_kernel, nullptr);
    std::vector<std::vector<Bytes>> results;
    for (int mode = 0; mode < 3; ++mode) {
      // A 16-bit tensor starts `shift` bytes into its allocation (scalars
      // stay aligned: float32 loads need it).
      const size_t shift = mode == 1 ? 2 : 0;
      std::vector<void*> allocations;
      auto device_buffer = [&](size_t bytes, size_t skip) -> char* {
        void* p = nullptr;
        EXPECT_EQ(cudaMalloc(&p, bytes + 256), cudaSuccess);
        allocations.push_back(p);
        return static_cast<char*>(p) + skip;
      };
      KernelArgs gpu_args;
      gpu_args.node = &node;
      for (size_t k = 0; k < rank0.size(); ++k) {
        char* d = device_buffer(host[k].size(), rank0[k] ? 0 : shift);
        EXPECT_EQ(cudaMemcpy(d, host[k].data(), host[k].size(), cudaMemcpyHostToDevice), cudaSuccess);
        gpu_args.inputs.push_back({d, types[k]});
      }
      for (int o = 0; o < outputs; ++o) {
        char* d = mode == 2 && o == 0 ? static_cast<char*>(gpu_args.inputs[0].data) : device_buffer(n * 2, shift);
        if (!(mode == 2 && o == 0)) {
          EXPECT_EQ(cudaMemset(d, 0xFF, n * 2), cudaSuccess);  // poison
        }
        gpu_args.outputs.push_back({d, {h, {n}}});
      }
      cudaStream_t stream = nullptr;
      EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
      cuda::CudaKernelContext context;
      context.native = stream;
      const absl::Status launched = cuda_kernel(context, gpu_args);
      EXPECT_TRUE(launched.ok()) << launched;
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
      std::vector<Bytes> got(outputs, Bytes(n * 2));
      for (int o = 0; o < outputs; ++o) {
        EXPECT_EQ(cudaMemcpy(got[o].data(), gpu_args.outputs[o].data, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_TRUE(CloseHalf(got[o], cpu_out[o], h, ChainTolerance(h))) << "mode " << mode << " output " << o;
      }
      for (void* p : allocations) EXPECT_EQ(cudaFree(p), cudaSuccess);
      results.push_back(std::move(got));
    }
    for (int o = 0; o < outputs; ++o) {
      EXPECT_TRUE(SameBytes(results[1][o], results[0][o])) << "unaligned vs aligned, output " << o;
      EXPECT_TRUE(SameBytes(results[2][o], results[0][o])) << "in place vs aligned, output " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, CudaHalfUpdate, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem::gpu_test
