#include "codegen/pointwise_kernel.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "codegen/source_hash.h"
#include "kernels/half.h"

namespace tandem::codegen {
namespace {

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// `value` rounded to T, held exactly in a double.
template <typename T>
double In(double value) {
  return static_cast<double>(static_cast<T>(value));
}

template <typename T>
PointwiseStep Lower(const FusedInstruction& ins) {
  PointwiseStep s;
  s.dst = ins.dst;
  s.a = ins.a;
  s.b = ins.b;
  switch (ins.op) {
    case FusedOpcode::kAdd:
      s.op = PointwiseOp::kFma;
      s.param = In<T>(ins.alpha);
      break;
    case FusedOpcode::kSub:
      s.op = PointwiseOp::kFma;
      s.param = -In<T>(ins.alpha);
      break;
    case FusedOpcode::kMul:
      s.op = PointwiseOp::kMul;
      break;
    case FusedOpcode::kDiv:
      s.op = PointwiseOp::kDiv;
      break;
    case FusedOpcode::kAddScalar:
    case FusedOpcode::kSubScalar: {
      const T product = static_cast<T>(ins.alpha) * static_cast<T>(ins.other);
      s.op = PointwiseOp::kAddConst;
      s.param = static_cast<double>(ins.op == FusedOpcode::kAddScalar ? product : -product);
      s.b = -1;
      break;
    }
    case FusedOpcode::kMulScalar:
      s.op = PointwiseOp::kMulConst;
      s.param = In<T>(ins.other);
      s.b = -1;
      break;
    case FusedOpcode::kDivScalar:
      s.op = PointwiseOp::kDivConst;
      s.param = In<T>(ins.other);
      s.b = -1;
      break;
    case FusedOpcode::kNeg:
      s.op = PointwiseOp::kNeg;
      break;
    case FusedOpcode::kSqrt:
      s.op = PointwiseOp::kSqrt;
      break;
    case FusedOpcode::kMaximum:
      s.op = PointwiseOp::kMax;
      break;
    case FusedOpcode::kMinimum:
      s.op = PointwiseOp::kMin;
      break;
    case FusedOpcode::kRelu:
      s.op = PointwiseOp::kRelu;
      break;
    case FusedOpcode::kThresholdBackward:
      s.op = PointwiseOp::kThresholdBackward;
      s.param = In<T>(ins.alpha);
      break;
  }
  return s;
}

// ---- source text ----

// An exact literal of the compute type.
std::string Literal(double value, bool f64) {
  if (f64) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    return absl::StrFormat("__longlong_as_double(0x%016xLL)", bits);
  }
  const float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return absl::StrFormat("__int_as_float(0x%08x)", bits);
}

// The expression of one step over the values `x` (register a) and `y`
// (register b; empty when the step has none).
std::string Expression(const PointwiseStep& s, const std::string& x, const std::string& y, bool f64) {
  const std::string p = Literal(s.param, f64);
  const char* sfx = f64 ? "d" : "f";  // __dadd_rn / __fadd_rn
  switch (s.op) {
    case PointwiseOp::kFma:
      if (s.param == 1.0) return absl::StrCat("__", sfx, "add_rn(", x, ", ", y, ")");  // fma(1, y, x) == x + y
      return f64 ? absl::StrCat("__fma_rn(", p, ", ", y, ", ", x, ")")
                 : absl::StrCat("__fmaf_rn(", p, ", ", y, ", ", x, ")");
    case PointwiseOp::kMul:
      return absl::StrCat("__", sfx, "mul_rn(", x, ", ", y, ")");
    case PointwiseOp::kDiv:
      return absl::StrCat("__", sfx, "div_rn(", x, ", ", y, ")");
    case PointwiseOp::kAddConst:
      return absl::StrCat("__", sfx, "add_rn(", x, ", ", p, ")");
    case PointwiseOp::kMulConst:
      return absl::StrCat("__", sfx, "mul_rn(", x, ", ", p, ")");
    case PointwiseOp::kDivConst:
      return absl::StrCat("__", sfx, "div_rn(", x, ", ", p, ")");
    case PointwiseOp::kNeg:
      return absl::StrCat("-", x);
    case PointwiseOp::kSqrt:
      return absl::StrCat("__", sfx, "sqrt_rn(", x, ")");
    case PointwiseOp::kMax:
      return absl::StrCat("tandem_max(", x, ", ", y, ")");
    case PointwiseOp::kMin:
      return absl::StrCat("tandem_min(", x, ", ", y, ")");
    case PointwiseOp::kRelu:
      return absl::StrCat(x, " < T(0) ? T(0) : ", x);
    case PointwiseOp::kThresholdBackward:
      return absl::StrCat(y, " > ", p, " ? ", x, " : T(0)");
  }
  return "T(0)";
}

// Definitions every kernel of storage type `dtype` uses: T, S (the stored
// element), one element's load and store, a 16-byte vector's, rounding.
std::string Prelude(DType dtype) {
  std::string out = R"(struct TandemPointwiseArgs {
  const void* in[8];
  void* out[4];
  long long n;
  const long long* skip_if_error;
};
)";
  switch (dtype) {
    case DType::kFloat64:
      absl::StrAppend(&out, R"(typedef double T;
typedef double S;
#define TANDEM_W 2
static __device__ __forceinline__ T tandem_round(T v) { return v; }
static __device__ __forceinline__ T tandem_load1(const void* p, long long i) { return static_cast<const S*>(p)[i]; }
static __device__ __forceinline__ void tandem_store1(void* p, long long i, T v) { static_cast<S*>(p)[i] = v; }
static __device__ __forceinline__ void tandem_loadv(const void* p, long long v, T (&x)[2]) {
  const double2 q = static_cast<const double2*>(p)[v];
  x[0] = q.x; x[1] = q.y;
}
static __device__ __forceinline__ void tandem_storev(void* p, long long v, const T (&x)[2]) {
  double2 q; q.x = x[0]; q.y = x[1];
  static_cast<double2*>(p)[v] = q;
}
)");
      break;
    case DType::kBFloat16:
    case DType::kFloat16: {
      const bool bf16 = dtype == DType::kBFloat16;
      absl::StrAppend(&out, "typedef float T;\ntypedef unsigned short S;\n#define TANDEM_W 8\n");
      if (bf16) {
        absl::StrAppend(
            &out,
            R"(static __device__ __forceinline__ T tandem_widen(S h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }
static __device__ __forceinline__ S tandem_narrow(T f) { S h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
)");
      } else {
        absl::StrAppend(
            &out,
            R"(static __device__ __forceinline__ T tandem_widen(S h) { T f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
static __device__ __forceinline__ S tandem_narrow(T f) { S h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
)");
      }
      absl::StrAppend(
          &out, R"(static __device__ __forceinline__ T tandem_round(T v) { return tandem_widen(tandem_narrow(v)); }
static __device__ __forceinline__ T tandem_load1(const void* p, long long i) { return tandem_widen(static_cast<const S*>(p)[i]); }
static __device__ __forceinline__ void tandem_store1(void* p, long long i, T v) { static_cast<S*>(p)[i] = tandem_narrow(v); }
static __device__ __forceinline__ void tandem_loadv(const void* p, long long v, T (&x)[8]) {
  const uint4 q = static_cast<const uint4*>(p)[v];
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    x[2 * j] = tandem_widen(static_cast<S>(w[j] & 0xffffu));
    x[2 * j + 1] = tandem_widen(static_cast<S>(w[j] >> 16));
  }
}
static __device__ __forceinline__ void tandem_storev(void* p, long long v, const T (&x)[8]) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = static_cast<unsigned>(tandem_narrow(x[2 * j])) | (static_cast<unsigned>(tandem_narrow(x[2 * j + 1])) << 16);
  }
  static_cast<uint4*>(p)[v] = make_uint4(w[0], w[1], w[2], w[3]);
}
)");
      break;
    }
    default:  // float32
      absl::StrAppend(&out, R"(typedef float T;
typedef float S;
#define TANDEM_W 4
static __device__ __forceinline__ T tandem_round(T v) { return v; }
static __device__ __forceinline__ T tandem_load1(const void* p, long long i) { return static_cast<const S*>(p)[i]; }
static __device__ __forceinline__ void tandem_store1(void* p, long long i, T v) { static_cast<S*>(p)[i] = v; }
static __device__ __forceinline__ void tandem_loadv(const void* p, long long v, T (&x)[4]) {
  const float4 q = static_cast<const float4*>(p)[v];
  x[0] = q.x; x[1] = q.y; x[2] = q.z; x[3] = q.w;
}
static __device__ __forceinline__ void tandem_storev(void* p, long long v, const T (&x)[4]) {
  static_cast<float4*>(p)[v] = make_float4(x[0], x[1], x[2], x[3]);
}
)");
      break;
  }
  absl::StrAppend(
      &out,
      R"(static __device__ __forceinline__ T tandem_max(T x, T y) { return x != x ? x : (y != y ? y : (x > y ? x : y)); }
static __device__ __forceinline__ T tandem_min(T x, T y) { return x != x ? x : (y != y ? y : (x < y ? x : y)); }
)");
  return out;
}

// A rank-0 input's value in T: of the program's dtype, or for a 16-bit
// program of any float dtype, rounded to the program's type (as the
// interpreter's LoadScalarInput).
std::string ScalarLoad(int k, DType program, DType input) {
  const std::string ptr = absl::StrCat("p.in[", k, "]");
  if (!IsHalf(program)) return absl::StrCat("*static_cast<const T*>(", ptr, ")");
  switch (input) {
    case DType::kFloat64:
      return absl::StrCat("tandem_round(static_cast<float>(*static_cast<const double*>(", ptr, ")))");
    case DType::kFloat32:
      return absl::StrCat("tandem_round(*static_cast<const float*>(", ptr, "))");
    case DType::kBFloat16:
      return absl::StrCat("tandem_round(__uint_as_float(static_cast<unsigned>(*static_cast<const unsigned short*>(",
                          ptr, ")) << 16))");
    default: {  // float16 (the program's own type when it is float16)
      return absl::StrCat("tandem_round(tandem_f16_scalar(*static_cast<const unsigned short*>(", ptr, ")))");
    }
  }
}

}  // namespace

std::vector<PointwiseStep> LowerPointwise(const FusedProgram& program, DType dtype) {
  std::vector<PointwiseStep> steps;
  for (FusedInstruction ins : program.code) {
    if (IsHalf(dtype)) {
      const float other = static_cast<float>(ins.other);
      ins.other = dtype == DType::kBFloat16 ? BFloat16(other).ToFloat() : Float16(other).ToFloat();
      steps.push_back(Lower<float>(ins));
    } else if (dtype == DType::kFloat32) {
      steps.push_back(Lower<float>(ins));
    } else {
      steps.push_back(Lower<double>(ins));
    }
  }
  return steps;
}

int PointwiseElementsPerVector(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 2;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 8;
    default:
      return 4;
  }
}

absl::StatusOr<PointwiseSpec> PointwiseSpecOf(const Graph& graph, int node) {
  if (node < 0 || node >= static_cast<int>(graph.nodes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no node ", node));
  }
  const Node& n = graph.nodes[node];
  if (n.op != kFusedElementwiseOp) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " is not a ", kFusedElementwiseOp, " node"));
  }
  PointwiseSpec spec;
  ASSIGN_OR_RETURN(spec.program, DecodeFusedProgram(n.attrs, static_cast<int>(n.inputs.size())));
  spec.dtype = graph.values[n.outputs[0]].type.dtype;
  if (spec.dtype != DType::kFloat32 && spec.dtype != DType::kFloat64 && !IsHalf(spec.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("no generated kernel for dtype ", DTypeName(spec.dtype)));
  }
  if (n.outputs.size() != spec.program.outputs.size()) {
    return absl::InvalidArgumentError("the node's outputs are not its program's");
  }
  for (int v : n.inputs) {
    const TensorType& t = graph.values[v].type;
    spec.scalar.push_back(t.rank() == 0);
    spec.input_dtypes.push_back(t.dtype);
  }
  return spec;
}

std::string BatchEntryName(const GeneratedKernel& kernel) { return absl::StrCat(kernel.name, "_batch"); }

GeneratedKernel GeneratePointwiseKernel(const PointwiseSpec& spec) {
  const bool f64 = spec.dtype == DType::kFloat64;
  const bool half = IsHalf(spec.dtype);
  const int num_inputs = spec.program.num_inputs;
  const int num_outputs = static_cast<int>(spec.program.outputs.size());
  const std::vector<PointwiseStep> steps = LowerPointwise(spec.program, spec.dtype);

  std::string body = Prelude(spec.dtype);
  if (half) {
    absl::StrAppend(
        &body,
        R"(static __device__ __forceinline__ float tandem_f16_scalar(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
)");
  }
  // The program: inputs in, outputs out, one statement per step.
  std::vector<std::string> params;
  for (int k = 0; k < num_inputs; ++k) params.push_back(absl::StrCat("const T r", k));
  for (int o = 0; o < num_outputs; ++o) params.push_back(absl::StrCat("T& out", o));
  absl::StrAppend(&body, "static __device__ __forceinline__ void tandem_element(", absl::StrJoin(params, ", "),
                  ") {\n");
  // A program reuses its registers, so each step's value gets a fresh name
  // (v<step>) and `current` says which name holds each register now.
  std::vector<std::string> current(static_cast<size_t>(kFusedMaxRegisters));
  for (int k = 0; k < num_inputs; ++k) current[k] = absl::StrCat("r", k);
  for (size_t i = 0; i < steps.size(); ++i) {
    const PointwiseStep& s = steps[i];
    const std::string e = Expression(s, current[s.a], s.b >= 0 ? current[s.b] : "", f64);
    current[s.dst] = absl::StrCat("v", i);
    absl::StrAppend(&body, "  const T ", current[s.dst], " = ", half ? absl::StrCat("tandem_round(", e, ")") : e,
                    ";\n");
  }
  for (int o = 0; o < num_outputs; ++o) {
    absl::StrAppend(&body, "  out", o, " = ", current[spec.program.outputs[o]], ";\n");
  }
  absl::StrAppend(&body, "}\n");

  // One tensor's loops, for threads `first`, `first + step`, ...
  absl::StrAppend(&body,
                  "static __device__ __forceinline__ void tandem_run(const TandemPointwiseArgs& p, long long first,"
                  " long long step) {\n"
                  "  if (p.skip_if_error != nullptr && *p.skip_if_error != 0) return;\n");
  std::vector<std::string> aligned_terms;
  for (int k = 0; k < num_inputs; ++k) {
    if (spec.scalar[k]) {
      absl::StrAppend(&body, "  const T s", k, " = ", ScalarLoad(k, spec.dtype, spec.input_dtypes[k]), ";\n");
    } else {
      aligned_terms.push_back(absl::StrCat("reinterpret_cast<unsigned long long>(p.in[", k, "])"));
    }
  }
  for (int o = 0; o < num_outputs; ++o) {
    aligned_terms.push_back(absl::StrCat("reinterpret_cast<unsigned long long>(p.out[", o, "])"));
  }
  absl::StrAppend(&body, "  const long long n = p.n;\n  const unsigned long long address_bits = ",
                  absl::StrJoin(aligned_terms, " | "), ";\n",
                  "  const long long vectors = (address_bits & 15ull) == 0 ? n / TANDEM_W : 0;\n"
                  "  for (long long v = first; v < vectors; v += step) {\n");
  std::vector<std::string> args_v, args_1;
  for (int k = 0; k < num_inputs; ++k) {
    if (spec.scalar[k]) {
      args_v.push_back(absl::StrCat("s", k));
      args_1.push_back(absl::StrCat("s", k));
    } else {
      absl::StrAppend(&body, "    T x", k, "[TANDEM_W];\n    tandem_loadv(p.in[", k, "], v, x", k, ");\n");
      args_v.push_back(absl::StrCat("x", k, "[e]"));
      args_1.push_back(absl::StrCat("tandem_load1(p.in[", k, "], i)"));
    }
  }
  for (int o = 0; o < num_outputs; ++o) {
    absl::StrAppend(&body, "    T y", o, "[TANDEM_W];\n");
    args_v.push_back(absl::StrCat("y", o, "[e]"));
    args_1.push_back(absl::StrCat("y", o));
  }
  absl::StrAppend(&body, "#pragma unroll\n    for (int e = 0; e < TANDEM_W; ++e) tandem_element(",
                  absl::StrJoin(args_v, ", "), ");\n");
  for (int o = 0; o < num_outputs; ++o) absl::StrAppend(&body, "    tandem_storev(p.out[", o, "], v, y", o, ");\n");
  absl::StrAppend(&body, "  }\n  for (long long i = vectors * TANDEM_W + first; i < n; i += step) {\n");
  for (int o = 0; o < num_outputs; ++o) absl::StrAppend(&body, "    T y", o, ";\n");
  absl::StrAppend(&body, "    tandem_element(", absl::StrJoin(args_1, ", "), ");\n");
  for (int o = 0; o < num_outputs; ++o) absl::StrAppend(&body, "    tandem_store1(p.out[", o, "], i, y", o, ");\n");
  absl::StrAppend(&body, "  }\n}\n");

  // The entry points: one tensor (the grid strides over it), and a batch of
  // alike tensors (block b works on the segment s with block_start[s] <= b <
  // block_start[s + 1], striding over that segment's blocks).
  absl::StrAppend(&body, "extern \"C\" __global__ void __launch_bounds__(", kPointwiseBlock,
                  ") KERNEL_NAME(const TandemPointwiseArgs p) {\n"
                  "  tandem_run(p, static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x,\n"
                  "             static_cast<long long>(gridDim.x) * blockDim.x);\n}\n");
  absl::StrAppend(&body, "struct TandemPointwiseBatch {\n  TandemPointwiseArgs seg[", kPointwiseBatchMax,
                  "];\n  long long block_start[", kPointwiseBatchMax + 1,
                  "];\n  long long count;\n};\n"
                  "extern \"C\" __global__ void __launch_bounds__(",
                  kPointwiseBlock,
                  ") BATCH_KERNEL_NAME(const TandemPointwiseBatch b) {\n"
                  "  const long long block = blockIdx.x;\n"
                  "  int lo = 0, hi = static_cast<int>(b.count) - 1;\n"
                  "  while (lo < hi) {\n"
                  "    const int mid = (lo + hi + 1) / 2;\n"
                  "    if (b.block_start[mid] <= block) lo = mid; else hi = mid - 1;\n"
                  "  }\n"
                  "  tandem_run(b.seg[lo], (block - b.block_start[lo]) * blockDim.x + threadIdx.x,\n"
                  "             (b.block_start[lo + 1] - b.block_start[lo]) * blockDim.x);\n}\n");

  GeneratedKernel kernel;
  kernel.name = absl::StrCat("tandem_pw_", SourceHash(body));
  kernel.source = absl::StrCat("// Generated by Tandem (codegen/pointwise_kernel.cc): a fused_elementwise program of ",
                               steps.size(), " instruction(s), ", DTypeName(spec.dtype), ".\n#define KERNEL_NAME ",
                               kernel.name, "\n#define BATCH_KERNEL_NAME ", BatchEntryName(kernel), "\n", body);
  return kernel;
}

}  // namespace tandem::codegen
