// Reference CPU kernel of fused_elementwise (ir/ops/fused_program.h).
//
// Each instruction computes exactly what the CPU kernel of its op computes
// (elementwise_kernels.cc, activation_kernels.cc), in the tensors' dtype T:
//   add/sub        p ± q when alpha is 1, else p ± T(alpha) * q (two roundings)
//   add/sub_scalar p ± s with s = T(alpha) * T(other), rounded in T first
//   mul/div_scalar p * T(other), p / T(other)
//   neg, sqrt      -p, std::sqrt(p)
//   maximum/minimum  NaN-propagating, as MaxMinKernel
//   relu           p < 0 ? 0 : p (keeps NaN), as ReluKernel
//   threshold_backward  self > T(t) ? grad : 0, as ThresholdBackwardKernel
//                  (t in float32 for a 16-bit program, as WithHalf runs it)
// so a fused node's outputs equal the unfused nodes' outputs bit for bit.
// A 16-bit program runs the same instructions on float32 registers, as the
// 16-bit path of those kernels (half_kernels.h) runs their float32 loops:
// inputs widen exactly, a rank-0 input of another dtype and a .Scalar op's
// `other` are rounded to the 16-bit type first, and each instruction's
// result is rounded to the 16-bit type at once (the unfused op stores it
// there).
//
// The program runs over chunks of elements, instruction by instruction, on a
// scratch register file. Every output element is stored after all input
// elements of its chunk are read, so output 0 may be input 0 (in place).
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status_macros.h"
#include "ir/ops/fused_program.h"
#include "kernels/cpu/half_kernels.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {
namespace {

constexpr int64_t kChunk = 256;

// A register in a chunk: element j is data[j * stride] (stride 0: a rank-0
// input's one element).
template <typename T>
struct RegisterView {
  const T* data = nullptr;
  int64_t stride = 1;
};

// dst[j] = f(x[j], y[j]) over `len` elements.
template <typename T, typename F>
void Map2(T* dst, RegisterView<T> x, RegisterView<T> y, int64_t len, F f) {
  for (int64_t j = 0; j < len; ++j) dst[j] = f(x.data[j * x.stride], y.data[j * y.stride]);
}

template <typename T, typename F>
void Map1(T* dst, RegisterView<T> x, int64_t len, F f) {
  for (int64_t j = 0; j < len; ++j) dst[j] = f(x.data[j * x.stride]);
}

template <typename T>
void RunInstruction(const FusedInstruction& ins, T* dst, RegisterView<T> x, RegisterView<T> y, int64_t len) {
  switch (ins.op) {
    case FusedOpcode::kAdd:
      if (ins.alpha == 1.0) {
        Map2(dst, x, y, len, [](T p, T q) { return p + q; });
      } else {
        const T a = Convert<T>(ins.alpha);
        Map2(dst, x, y, len, [a](T p, T q) { return p + a * q; });
      }
      return;
    case FusedOpcode::kSub:
      if (ins.alpha == 1.0) {
        Map2(dst, x, y, len, [](T p, T q) { return p - q; });
      } else {
        const T a = Convert<T>(ins.alpha);
        Map2(dst, x, y, len, [a](T p, T q) { return p - a * q; });
      }
      return;
    case FusedOpcode::kMul:
      Map2(dst, x, y, len, [](T p, T q) { return p * q; });
      return;
    case FusedOpcode::kDiv:
      Map2(dst, x, y, len, [](T p, T q) { return p / q; });
      return;
    case FusedOpcode::kAddScalar: {
      const T s = Convert<T>(ins.alpha) * Convert<T>(ins.other);
      Map1(dst, x, len, [s](T p) { return p + s; });
      return;
    }
    case FusedOpcode::kSubScalar: {
      const T s = Convert<T>(ins.alpha) * Convert<T>(ins.other);
      Map1(dst, x, len, [s](T p) { return p - s; });
      return;
    }
    case FusedOpcode::kMulScalar: {
      const T v = Convert<T>(ins.other);
      Map1(dst, x, len, [v](T p) { return p * v; });
      return;
    }
    case FusedOpcode::kDivScalar: {
      const T v = Convert<T>(ins.other);
      Map1(dst, x, len, [v](T p) { return p / v; });
      return;
    }
    case FusedOpcode::kNeg:
      Map1(dst, x, len, [](T p) { return -p; });
      return;
    case FusedOpcode::kSqrt:
      Map1(dst, x, len, [](T p) { return std::sqrt(p); });
      return;
    case FusedOpcode::kMaximum:
      Map2(dst, x, y, len, [](T p, T q) {
        if (std::isnan(p)) return p;
        if (std::isnan(q)) return q;
        return p > q ? p : q;
      });
      return;
    case FusedOpcode::kMinimum:
      Map2(dst, x, y, len, [](T p, T q) {
        if (std::isnan(p)) return p;
        if (std::isnan(q)) return q;
        return p < q ? p : q;
      });
      return;
    case FusedOpcode::kRelu:
      Map1(dst, x, len, [](T p) { return p < T(0) ? T(0) : p; });
      return;
    case FusedOpcode::kThresholdBackward: {
      const T t = Convert<T>(ins.alpha);
      Map2(dst, x, y, len, [t](T grad, T self) { return self > t ? grad : T(0); });
      return;
    }
  }
}

template <typename T>
void RunProgram(const FusedProgram& program, const KernelArgs& args) {
  const int64_t n = args.outputs[0].numel();
  const int num_inputs = program.num_inputs;
  std::vector<T> scalars(num_inputs);
  std::vector<T> scratch(static_cast<size_t>(kFusedMaxRegisters) * kChunk);
  std::vector<RegisterView<T>> regs(kFusedMaxRegisters);
  for (int k = 0; k < num_inputs; ++k) {
    if (args.inputs[k].type.rank() == 0) scalars[k] = LoadScalar<T>(args.inputs[k]);
  }
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t len = std::min(kChunk, n - start);
    for (int k = 0; k < num_inputs; ++k) {
      const TensorArg& in = args.inputs[k];
      regs[k] = in.type.rank() == 0 ? RegisterView<T>{&scalars[k], 0} : RegisterView<T>{in.as<const T>() + start, 1};
    }
    for (const FusedInstruction& ins : program.code) {
      T* dst = &scratch[static_cast<size_t>(ins.dst) * kChunk];
      const RegisterView<T> y = ins.b >= 0 ? regs[ins.b] : RegisterView<T>{};
      RunInstruction<T>(ins, dst, regs[ins.a], y, len);
      regs[ins.dst] = {dst, 1};
    }
    // Outputs are instruction registers (never inputs), so no store below
    // can change a value another output is copied from.
    for (size_t o = 0; o < program.outputs.size(); ++o) {
      const T* src = regs[program.outputs[o]].data;
      std::copy(src, src + len, args.outputs[o].as<T>() + start);
    }
  }
}

// `value` rounded to the 16-bit type H, as a float.
template <typename H>
float Round(float value) {
  return H(value).ToFloat();
}

// A 16-bit program (H = BFloat16 or Float16) on float32 registers.
template <typename H>
void RunHalfProgram(const FusedProgram& decoded, const KernelArgs& args) {
  FusedProgram program = decoded;
  for (FusedInstruction& ins : program.code) {
    if (ins.op == FusedOpcode::kAddScalar || ins.op == FusedOpcode::kSubScalar || ins.op == FusedOpcode::kMulScalar ||
        ins.op == FusedOpcode::kDivScalar) {
      ins.other = Round<H>(static_cast<float>(ins.other));
    }
  }
  const int64_t n = args.outputs[0].numel();
  const int num_inputs = program.num_inputs;
  std::vector<float> scalars(num_inputs);
  std::vector<float> scratch(static_cast<size_t>(kFusedMaxRegisters) * kChunk);
  std::vector<RegisterView<float>> regs(kFusedMaxRegisters);
  for (int k = 0; k < num_inputs; ++k) {
    if (args.inputs[k].type.rank() == 0) scalars[k] = Round<H>(static_cast<float>(FloatElement(args.inputs[k], 0)));
  }
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t len = std::min(kChunk, n - start);
    for (int k = 0; k < num_inputs; ++k) {
      const TensorArg& in = args.inputs[k];
      if (in.type.rank() == 0) {
        regs[k] = RegisterView<float>{&scalars[k], 0};
        continue;
      }
      // Inputs of rank > 0 have the program's 16-bit dtype (the op's type
      // rule): widened into their register, which no instruction writes.
      float* dst = &scratch[static_cast<size_t>(k) * kChunk];
      const H* src = in.as<const H>() + start;
      for (int64_t j = 0; j < len; ++j) dst[j] = src[j].ToFloat();
      regs[k] = RegisterView<float>{dst, 1};
    }
    for (const FusedInstruction& ins : program.code) {
      float* dst = &scratch[static_cast<size_t>(ins.dst) * kChunk];
      const RegisterView<float> y = ins.b >= 0 ? regs[ins.b] : RegisterView<float>{};
      RunInstruction<float>(ins, dst, regs[ins.a], y, len);
      for (int64_t j = 0; j < len; ++j) dst[j] = Round<H>(dst[j]);
      regs[ins.dst] = {dst, 1};
    }
    for (size_t o = 0; o < program.outputs.size(); ++o) {
      const float* src = regs[program.outputs[o]].data;
      H* out = args.outputs[o].as<H>() + start;
      for (int64_t j = 0; j < len; ++j) out[j] = H(src[j]);
    }
  }
}

absl::Status FusedElementwiseKernel(const KernelArgs& args) {
  ASSIGN_OR_RETURN(FusedProgram program, DecodeFusedProgram(args.node->attrs, static_cast<int>(args.inputs.size())));
  switch (args.outputs[0].type.dtype) {
    case DType::kBFloat16:
      RunHalfProgram<BFloat16>(program, args);
      return absl::OkStatus();
    case DType::kFloat16:
      RunHalfProgram<Float16>(program, args);
      return absl::OkStatus();
    default:
      break;
  }
  return DispatchFloat(args, args.outputs[0].type.dtype, [&](auto tag) {
    RunProgram<decltype(tag)>(program, args);
    return absl::OkStatus();
  });
}

}  // namespace

void AddFusedKernels(CpuKernelTable& table) { table[kFusedElementwiseOp] = FusedElementwiseKernel; }

}  // namespace tandem::cpu
