#include "kernels/cuda/blas.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <atomic>
#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cuda/device_choices.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/time_runs.h"

namespace tandem::cuda {
namespace {

std::atomic<bool> g_force_cublas{false};

absl::Status BlasStatus(cublasStatus_t status, absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(call, ": ", cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

#define BLAS_RETURN_IF_ERROR(call)                                                         \
  do {                                                                                     \
    const cublasStatus_t tandem_blas_status_ = (call);                                     \
    if (tandem_blas_status_ != CUBLAS_STATUS_SUCCESS) {                                    \
      return BlasStatus(tandem_blas_status_, ::tandem::device::internal::CallName(#call)); \
    }                                                                                      \
  } while (0)

// Elements between rows of out (and c).
int64_t OutRowStride(const MatmulSpec& s) { return s.ld_out > 0 ? s.ld_out : s.m; }

// Largest power of two up to 256 that divides the address (the alignment
// cuBLASLt's heuristics ask about).
uint32_t AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// What selects an algorithm: the problem and the operands' alignments.
using AlgoKey = std::array<int64_t, 15>;

// A stream's BLAS state: both handles, the workspace and the algorithms
// chosen so far (nullopt: cuBLASLt had none, use classic cuBLAS).
class BlasState final : public device::CudaStream::Attachment {
 public:
  static absl::StatusOr<BlasState*> For(device::CudaStream& stream) {
    static const char kKey = 0;
    if (auto* state = static_cast<BlasState*>(stream.attachment(&kKey))) return state;
    auto state = std::make_unique<BlasState>();
    CUDA_RETURN_IF_ERROR(cudaSetDevice(stream.ordinal()));
    BLAS_RETURN_IF_ERROR(cublasLtCreate(&state->lt));
    BLAS_RETURN_IF_ERROR(cublasCreate(&state->blas));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&state->workspace, kBlasWorkspaceBytes));
    BLAS_RETURN_IF_ERROR(cublasSetStream(state->blas, stream.native()));
    BLAS_RETURN_IF_ERROR(cublasSetWorkspace(state->blas, state->workspace, kBlasWorkspaceBytes));
    state->device = stream.ordinal();
    BlasState* raw = state.get();
    stream.Attach(&kKey, std::move(state));
    return raw;
  }

  ~BlasState() override {
    if (blas != nullptr) cublasDestroy(blas);
    if (lt != nullptr) cublasLtDestroy(lt);
    if (workspace != nullptr) cudaFree(workspace);
  }

  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  int device = 0;  // the stream's device ordinal
  absl::flat_hash_map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

// The algorithms chosen on any stream, by device (nullopt: cuBLASLt had
// none): a stream meeting a problem another stream of its device has met
// takes that choice instead of timing candidates again. Two streams (two
// lanes, or a job's graphed and op-by-op programs) then run the same
// kernels for the same product, so a job's results do not depend on the
// lane it runs in; each choice is made and timed once per device. (Timed
// per stream, two streams took different algorithms for the same product
// whenever two candidates timed within noise of each other, and their
// float32 results differed in the last bits.) A cublasLtMatmulAlgo_t
// describes a kernel configuration, valid with any handle of its device.
using SharedAlgos = DeviceChoices<AlgoKey, std::optional<cublasLtMatmulAlgo_t>>;

SharedAlgos& DeviceAlgos() {
  static SharedAlgos* const algos = new SharedAlgos;
  return *algos;
}

// RAII owners of cuBLASLt descriptors.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (y != nullptr) cublasLtMatrixLayoutDestroy(y);
    if (x != nullptr) cublasLtMatrixLayoutDestroy(x);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// The column-major view: D[m x n] = op(X)[m x k] @ op(Y)[k x n], where X is
// b's memory and Y is a's.
struct ColumnMajor {
  int64_t x_rows, x_cols, y_rows, y_cols;
  cublasOperation_t x_op, y_op;
};

ColumnMajor ToColumnMajor(const MatmulSpec& s) {
  ColumnMajor c;
  c.x_op = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.x_rows = s.trans_b ? s.k : s.m;
  c.x_cols = s.trans_b ? s.m : s.k;
  c.y_op = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.y_rows = s.trans_a ? s.n : s.k;
  c.y_cols = s.trans_a ? s.k : s.n;
  return c;
}

bool UsesTf32(const MatmulSpec& s) { return s.allow_tf32 && s.dtype == DType::kFloat32; }

bool IsHalf(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// float64 computes in float64; float32 and the 16-bit types in float32.
bool ComputesInDouble(DType dtype) { return dtype == DType::kFloat64; }

cublasComputeType_t ComputeType(const MatmulSpec& s) {
  if (ComputesInDouble(s.dtype)) return CUBLAS_COMPUTE_64F;
  return UsesTf32(s) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// The storage type of the operands, the output and the bias.
cudaDataType_t DataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Host scalars in the compute type (float for float32 and the 16-bit types).
struct Scalars {
  float f[2];
  double d[2];
  const void* alpha(DType t) const { return ComputesInDouble(t) ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* beta(DType t) const { return ComputesInDouble(t) ? static_cast<const void*>(&d[1]) : &f[1]; }
};

// How algorithms are chosen: measured by default (the heuristics' first
// kCandidates run on the call's own operands, the first time a problem runs
// on a device, and the fastest kept when it beats the heuristics' first
// choice by more than 3%; DeviceAlgos), or the heuristics' first choice
// alone with TANDEM_BLAS_ALGOS=heuristic in the daemon's environment.
bool MeasureAlgorithms() {
  static const bool measure = !EnvIs("TANDEM_BLAS_ALGOS", "heuristic");
  return measure;
}

constexpr int kCandidates = 8;

absl::Status LtMatmul(BlasState& state, cudaStream_t stream, const MatmulSpec& s, const Scalars& scalars,
                      bool* no_algorithm) {
  const cudaDataType_t type = DataType(s.dtype);
  const cudaDataType_t scale_type = ComputesInDouble(s.dtype) ? CUDA_R_64F : CUDA_R_32F;
  const ColumnMajor cm = ToColumnMajor(s);
  const bool use_c = s.beta != 0.0 && s.c != nullptr;
  LtDescs descs;
  BLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&descs.op, ComputeType(s), scale_type));
  BLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_TRANSA, &cm.x_op, sizeof(cm.x_op)));
  BLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_TRANSB, &cm.y_op, sizeof(cm.y_op)));
  if (s.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    BLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    BLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.bias, sizeof(s.bias)));
  }
  BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&descs.x, type, cm.x_rows, cm.x_cols, cm.x_rows));
  BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&descs.y, type, cm.y_rows, cm.y_cols, cm.y_rows));
  BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&descs.d, type, s.m, s.n, OutRowStride(s)));
  if (s.batch > 1) {
    const int32_t count = static_cast<int32_t>(s.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[3] = {
        {descs.x, s.stride_b}, {descs.y, s.stride_a}, {descs.d, s.stride_out}};
    for (const auto& [layout, stride] : layouts) {
      BLAS_RETURN_IF_ERROR(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &stride, sizeof(stride)));
    }
  }
  const void* c = use_c ? s.c : s.out;

  const AlgoKey key = {static_cast<int64_t>(s.dtype),
                       s.n,
                       s.k,
                       s.m,
                       s.trans_a,
                       s.trans_b,
                       s.bias != nullptr,
                       AlignmentOf(s.a),
                       AlignmentOf(s.b),
                       AlignmentOf(c),
                       AlignmentOf(s.out),
                       s.bias != nullptr ? AlignmentOf(s.bias) : 0,
                       s.batch,
                       OutRowStride(s),
                       UsesTf32(s)};
  auto it = state.algos.find(key);
  if (it == state.algos.end()) {
    if (auto shared = DeviceAlgos().Find(state.device, key); shared.has_value()) {
      it = state.algos.emplace(key, *shared).first;
    }
  }
  if (it == state.algos.end()) {
    BLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&descs.pref));
    const size_t workspace = kBlasWorkspaceBytes;
    BLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(descs.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &workspace, sizeof(workspace)));
    const uint32_t align[4] = {AlignmentOf(s.b), AlignmentOf(s.a), AlignmentOf(c), AlignmentOf(s.out)};
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      BLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(descs.pref, attrs[i], &align[i], sizeof(align[i])));
    }
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(state.lt, descs.op, descs.x, descs.y, descs.d, descs.d,
                                                                 descs.pref, kCandidates, results, &found);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
      algo = results[0].algo;
    } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
      return BlasStatus(status, "cublasLtMatmulAlgoGetHeuristic");
    }
    // Repeated runs must leave out as one run does: not when out is also
    // the c it accumulates into.
    const bool repeatable = !(use_c && c == s.out);
    if (algo.has_value() && found > 1 && repeatable && MeasureAlgorithms() &&
        !Capturing(stream, /*if_unknown=*/true)) {  // timing synchronizes: not when unsure
      const auto run = [&](const cublasLtMatmulAlgo_t& a) {
        return cublasLtMatmul(state.lt, descs.op, scalars.alpha(s.dtype), s.b, descs.x, s.a, descs.y,
                              scalars.beta(s.dtype), c, descs.d, s.out, descs.d, &a, state.workspace,
                              kBlasWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
      };
      const float first_ms = TimeRuns(stream, [&] { return run(results[0].algo); });
      float best_ms = first_ms * 0.97f;
      int best = 0;
      for (int i = 1; first_ms >= 0 && i < found; ++i) {
        const float ms = TimeRuns(
            stream, [&] { return run(results[i].algo); }, GiveUpMs(first_ms));
        if (ms >= 0 && ms < best_ms) {
          best_ms = ms;
          best = i;
        }
      }
      if (first_ms >= 0) algo = results[best].algo;
      TLOG_DEBUG("cuBLASLt algorithms timed")
          .With("problem", absl::StrCat(s.batch, "x[", s.n, ",", s.k, "]@[", s.k, ",", s.m, "]"))
          .With("candidates", found)
          .With("heuristic_ms", first_ms)
          .With("chosen", best == 0 ? std::string("the heuristic's first")
                                    : absl::StrCat("candidate ", best, " ", best_ms, " ms"));
    }
    it = state.algos.emplace(key, DeviceAlgos().Put(state.device, key, algo)).first;
  }
  if (!it->second.has_value()) {
    *no_algorithm = true;
    return absl::OkStatus();
  }
  BLAS_RETURN_IF_ERROR(cublasLtMatmul(state.lt, descs.op, scalars.alpha(s.dtype), s.b, descs.x, s.a, descs.y,
                                      scalars.beta(s.dtype), c, descs.d, s.out, descs.d, &*it->second, state.workspace,
                                      kBlasWorkspaceBytes, stream));
  return absl::OkStatus();
}

// Classic cuBLAS: C must be D, so c or the broadcast bias goes into out
// first.
absl::Status ClassicMatmul(BlasState& state, cudaStream_t stream, const MatmulSpec& s, Scalars scalars) {
  if (s.n > INT_MAX || s.m > INT_MAX || s.k > INT_MAX || OutRowStride(s) > INT_MAX) {
    return absl::UnimplementedError(absl::StrCat("matrix product [", s.n, ", ", s.k, "] @ [", s.k, ", ", s.m,
                                                 "] has a dim past cuBLAS's 32-bit limit"));
  }
  const size_t element = DTypeSize(s.dtype);
  if (s.bias != nullptr) {
    StridedOperand rows;
    rows.rank = 2;
    rows.sizes[0] = s.n;
    rows.sizes[1] = s.m;
    rows.strides[0] = 0;
    rows.strides[1] = 1;
    CUDA_RETURN_IF_ERROR(LaunchGather(static_cast<int>(element), s.n * s.m, s.bias, rows, s.out, stream));
    scalars.f[1] = 1.0f;
    scalars.d[1] = 1.0;
  } else if (s.beta != 0.0 && s.c != nullptr && s.c != s.out) {
    const size_t pitch = static_cast<size_t>(OutRowStride(s)) * element;
    CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(s.out, pitch, s.c, pitch, static_cast<size_t>(s.m) * element,
                                           static_cast<size_t>(s.n), cudaMemcpyDeviceToDevice, stream));
  } else if (s.c == nullptr) {
    scalars.f[1] = 0.0f;
    scalars.d[1] = 0.0;
  }
  const cudaDataType_t type = DataType(s.dtype);
  const ColumnMajor cm = ToColumnMajor(s);
  if (s.batch > 1) {
    if (s.batch > INT_MAX) return absl::UnimplementedError("batched product past cuBLAS's 32-bit batch count");
    BLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
        state.blas, cm.x_op, cm.y_op, static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k),
        scalars.alpha(s.dtype), s.b, type, static_cast<int>(cm.x_rows), s.stride_b, s.a, type,
        static_cast<int>(cm.y_rows), s.stride_a, scalars.beta(s.dtype), s.out, type, static_cast<int>(s.m),
        s.stride_out, static_cast<int>(s.batch), ComputeType(s), CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  BLAS_RETURN_IF_ERROR(cublasGemmEx(
      state.blas, cm.x_op, cm.y_op, static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k),
      scalars.alpha(s.dtype), s.b, type, static_cast<int>(cm.x_rows), s.a, type, static_cast<int>(cm.y_rows),
      scalars.beta(s.dtype), s.out, type, static_cast<int>(OutRowStride(s)), ComputeType(s), CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace

void SetMatmulForceCublasForTesting(bool force) { g_force_cublas.store(force); }

absl::Status Matmul(device::CudaStream& stream, const MatmulSpec& spec) {
  if (spec.dtype != DType::kFloat32 && spec.dtype != DType::kFloat64 && !IsHalf(spec.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA matrix product has no kernel for dtype ", DTypeName(spec.dtype)));
  }
  if (spec.n <= 0 || spec.m <= 0 || spec.k <= 0 || spec.batch <= 0) {
    return absl::InternalError("Matmul needs positive dims; the caller handles empty products");
  }
  if (spec.batch > 1 && (spec.c != nullptr || spec.bias != nullptr)) {
    return absl::InternalError("a batched Matmul takes no c or bias");
  }
  if (spec.ld_out != 0 && (spec.ld_out < spec.m || spec.bias != nullptr || spec.batch > 1)) {
    return absl::InternalError("Matmul's ld_out must be 0 or at least m, and takes no bias or batches");
  }
  ASSIGN_OR_RETURN(BlasState * state, BlasState::For(stream));
  Scalars scalars;
  scalars.f[0] = static_cast<float>(spec.alpha);
  scalars.d[0] = spec.alpha;
  const double beta = spec.c != nullptr ? spec.beta : 0.0;
  scalars.f[1] = static_cast<float>(beta);
  scalars.d[1] = beta;
  if (!g_force_cublas.load()) {
    bool no_algorithm = false;
    RETURN_IF_ERROR(LtMatmul(*state, stream.native(), spec, scalars, &no_algorithm));
    if (!no_algorithm) return absl::OkStatus();
  }
  return ClassicMatmul(*state, stream.native(), spec, scalars);
}

}  // namespace tandem::cuda
