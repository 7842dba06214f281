// The CPU kernel tests' host tensor (TestTensor), its elements read and
// written as doubles in every dtype, and their way to run one op: its kernel (FindCpuKernel) on outputs of the
// registry's inferred types, poisoned first so that an output the kernel leaves unwritten shows, optionally with output
// 0 on input 0's buffer (as the planner places kInPlace and kView ops). Test-only; header-only; thread-compatible.
#ifndef TANDEM_KERNELS_CPU_RUN_OP_TEST_UTIL_H_
#define TANDEM_KERNELS_CPU_RUN_OP_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "ir/attrs.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/kernel.h"

namespace tandem::cpu {

// A test's host tensor: `type` and 8-byte aligned storage for it (one word
// more than it needs, so that even an empty tensor has an address).
struct TestTensor {
  TensorType type;
  std::vector<uint64_t> storage;

  explicit TestTensor(TensorType t) : type(std::move(t)), storage(type.bytes() / 8 + 1) {}
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  int64_t numel() const { return type.numel(); }
};

// Element i of `t` as a double (16-bit floats widened, bools 0 or 1).
inline double ElementAsDouble(const TestTensor& t, int64_t i) {
  switch (t.type.dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(t.data())[i];
    case DType::kFloat64:
      return static_cast<const double*>(t.data())[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(t.data())[i]);
    case DType::kInt32:
      return static_cast<const int32_t*>(t.data())[i];
    case DType::kBool:
      return static_cast<const bool*>(t.data())[i] ? 1.0 : 0.0;
    case DType::kBFloat16:
      return static_cast<const BFloat16*>(t.data())[i].ToFloat();
    case DType::kFloat16:
      return static_cast<const Float16*>(t.data())[i].ToFloat();
  }
  ADD_FAILURE() << "dtype not handled by the test";
  return 0.0;
}

// Sets element i of `t` to `v`, converted as a static_cast would (16-bit
// floats through float, rounded to nearest; bools: v != 0).
inline void SetElement(TestTensor& t, int64_t i, double v) {
  switch (t.type.dtype) {
    case DType::kFloat32:
      static_cast<float*>(t.data())[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      static_cast<double*>(t.data())[i] = v;
      return;
    case DType::kInt64:
      static_cast<int64_t*>(t.data())[i] = static_cast<int64_t>(v);
      return;
    case DType::kInt32:
      static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(v);
      return;
    case DType::kBool:
      static_cast<bool*>(t.data())[i] = v != 0.0;
      return;
    case DType::kBFloat16:
      static_cast<BFloat16*>(t.data())[i] = BFloat16(static_cast<float>(v));
      return;
    case DType::kFloat16:
      static_cast<Float16*>(t.data())[i] = Float16(static_cast<float>(v));
      return;
  }
  ADD_FAILURE() << "dtype not handled by the test";
}

// A tensor of `dtype` and `shape` holding `values` (one per element).
inline TestTensor MakeTensor(DType dtype, Shape shape, const std::vector<double>& values) {
  TestTensor t({dtype, std::move(shape)});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i) SetElement(t, i, values[i]);
  return t;
}

// `T` is a test's host tensor: T(TensorType) allocates it, `type`,
// `data()`, and `storage` (a vector of 8-byte words). `poison` fills every
// output byte before the kernel runs. With `output_is_input`, output 0 is
// written into input 0 and returned as a copy of it.
template <typename T>
absl::StatusOr<std::vector<T>> RunCpuOp(const std::string& op, const Attrs& attrs, std::vector<T>& inputs,
                                        uint8_t poison, bool output_is_input = false) {
  const OpDef* def = OpRegistry::Global().Find(op);
  if (def == nullptr) return absl::NotFoundError("no op " + op);
  const int count = static_cast<int>(inputs.size());
  if (count < def->min_inputs || (def->max_inputs >= 0 && count > def->max_inputs)) {
    return absl::InvalidArgumentError(op + ": input count out of the op's range");
  }
  std::vector<TensorType> in_types;
  for (const T& t : inputs) in_types.push_back(t.type);
  ASSIGN_OR_RETURN(std::vector<TensorType> out_types, def->infer(attrs, in_types));
  Node node;
  node.op = op;
  node.def = def;
  node.attrs = attrs;
  KernelArgs args;
  args.node = &node;
  for (T& t : inputs) args.inputs.push_back(TensorArg{t.data(), t.type});
  std::vector<T> outputs;
  for (const TensorType& type : out_types) {
    outputs.emplace_back(type);
    std::memset(outputs.back().data(), poison, outputs.back().storage.size() * 8);
  }
  for (T& t : outputs) args.outputs.push_back(TensorArg{t.data(), t.type});
  if (output_is_input) {
    if (inputs.empty() || outputs.empty() || inputs[0].type.bytes() != outputs[0].type.bytes()) {
      return absl::InternalError("output 0 cannot take input 0's place");
    }
    args.outputs[0].data = inputs[0].data();
  }
  CpuKernelFn fn = FindCpuKernel(op);
  if (fn == nullptr) return absl::UnimplementedError("no CPU kernel for " + op);
  RETURN_IF_ERROR(fn(args));
  if (output_is_input) outputs[0].storage = inputs[0].storage;
  return outputs;
}

// Every element of `t`, as doubles.
inline std::vector<double> ElementsAsDoubles(const TestTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = ElementAsDouble(t, i);
  return v;
}

// RunCpuOp that must work: a failure is a test failure, and no outputs.
inline std::vector<TestTensor> MustRunCpuOp(const std::string& op, const Attrs& attrs, std::vector<TestTensor> inputs,
                                            uint8_t poison) {
  auto out = RunCpuOp(op, attrs, inputs, poison);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  return out.ok() ? std::move(*out) : std::vector<TestTensor>{};
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_RUN_OP_TEST_UTIL_H_
