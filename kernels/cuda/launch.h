// The launchers of Tandem's own CUDA kernels: plain functions over raw
// device pointers and small parameter structs, with no absl types, so that
// the .cu files stay free of host-library headers and the op wrappers
// (*_ops.cc) do all validation and attribute parsing.
//
// Every launcher enqueues on `stream` and returns the launch's error
// (cudaGetLastError after the launch; cudaSuccess when there is nothing to
// do). Shapes arrive already collapsed: adjacent dims that every operand
// walks contiguously are merged (strided_shape.h), so most launches see rank
// 1 or 2. Thread-safe (stateless).
#ifndef TANDEM_KERNELS_CUDA_LAUNCH_H_
#define TANDEM_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"

namespace tandem::cuda {

inline constexpr int kMaxDims = 8;

// An operand read at the indices of an output of shape `sizes` (row-major):
// element offset = sum(index[d] * strides[d]). Broadcast dims have stride 0.
struct StridedOperand {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// Where kernels report bad data (a class label out of range): a device
// int64[2], zero when the iteration starts. The first kernel thread that
// finds a bad value stores `node + 1` into word[0] (compare-and-swap from 0)
// and then the value into word[1]; later ones leave it alone.
struct ErrorWord {
  int64_t* word = nullptr;
  int32_t node = 0;
};

// An index tensor's elements on the device: int64 or int32, as PyTorch's
// index-taking ops accept (token ids, class labels, gather indices). The
// launchers that take one answer cudaErrorInvalidValue, without launching,
// for another dtype.
struct IndexOperand {
  const void* data = nullptr;
  DType dtype = DType::kInt64;
};

// Calls f(I{}) with I the C++ type of an index dtype (int64_t or int32_t);
// false, without calling f, for any other dtype.
template <typename F>
bool DispatchIndex(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kInt64:
      f(int64_t{});
      return true;
    case DType::kInt32:
      f(int32_t{});
      return true;
    default:
      return false;
  }
}

// ---- elementwise (elementwise_kernels.cu) ----

// A number attribute in both forms, so that integer kernels get it exactly
// (a double holds integers only up to 2^53).
struct ScalarParam {
  double f = 0.0;
  int64_t i = 0;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kThresholdBackward };
enum class UnaryOp { kNeg, kRelu, kSqrt, kAddConst, kMulConst, kDivConst };

// out[i] = op(a[i], b[i]) over out's `n` elements, a and b of `dtype`.
//   kAdd/kSub: a ± param * b; kThresholdBackward: b > param ? a : 0 (a is
//   grad_output, b is self).
// `a` and `b` describe how each operand is read (layout rank 0: contiguous,
// element i). An operand with `scalar` set is instead one element of
// `scalar_dtype` converted to `dtype` (a rank-0 operand of another dtype, or
// any single element), read once per thread.
struct BinaryOperand {
  const void* data = nullptr;
  StridedOperand layout;
  bool scalar = false;  // one element of `scalar_dtype`
  DType scalar_dtype = DType::kFloat32;
};
cudaError_t LaunchBinary(BinaryOp op, DType dtype, int64_t n, const BinaryOperand& a, const BinaryOperand& b, void* out,
                         ScalarParam param, cudaStream_t stream);

// out[i] = op(in[offset(i)]): kAddConst in + param, kMulConst in * param,
// kDivConst in / param. `in` is contiguous when in_layout.rank == 0.
cudaError_t LaunchUnary(UnaryOp op, DType dtype, int64_t n, const void* in, const StridedOperand& in_layout, void* out,
                        ScalarParam param, cudaStream_t stream);

// ---- copies and fills (copy_kernels.cu) ----

// out[i] = convert(in[offset(i)]) with offsets from `in_layout` (rank 0:
// contiguous). Dtypes: float32, float64, int64, int32, bool.
cudaError_t LaunchConvertCopy(DType out_dtype, DType in_dtype, int64_t n, const void* in,
                              const StridedOperand& in_layout, void* out, cudaStream_t stream);

// The same gather for any dtype, moving elements of `element_bytes` (1, 2,
// 4 or 8) bytes.
cudaError_t LaunchGather(int element_bytes, int64_t n, const void* in, const StridedOperand& in_layout, void* out,
                         cudaStream_t stream);

// `rows` rows of `width` bytes from src (rows `src_pitch` bytes apart) to
// dst (`dst_pitch` apart), a thread per 16-, 8-, 4- or 1-byte unit (the
// widest the pointers, pitches and width allow): for many narrow rows, such
// as a channels-last cat or slice along channels, where cudaMemcpy2DAsync
// is slow. False (nothing launched) when rows * width or a pitch reaches
// 2^31; the launch error is the caller's to read.
bool LaunchCopyRows(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width, int64_t rows,
                    cudaStream_t stream);

// out[b][j][i] = in[b][i][j] for `batch` matrices of rows x cols: a tiled
// transpose with coalesced reads and writes.
cudaError_t LaunchTranspose(int element_bytes, int64_t batch, int64_t rows, int64_t cols, const void* in, void* out,
                            cudaStream_t stream);

// Fills n elements of `dtype` with `value` (converted as a C++ cast; bool:
// nonzero).
cudaError_t LaunchFill(DType dtype, int64_t n, double value, void* out, cudaStream_t stream);

// Copies `bytes` bytes from src to dst unless error[0] is nonzero (an
// earlier kernel of the iteration found bad data): the guarded write-back
// of an iteration's updates. error may be null (always copies). src and dst
// must not overlap.
cudaError_t LaunchCopyUnlessError(const int64_t* error, const void* src, void* dst, size_t bytes, cudaStream_t stream);

// The end of a data-checking iteration (cuda_program.cc): copies the two
// words of `error` (device memory) to `host` (page-locked host memory,
// addressed from the device) and zeroes `error` for the next iteration. One
// thread: a kernel where a device-to-host copy and a memset were.
cudaError_t LaunchPublishErrorWord(int64_t* error, int64_t* host, cudaStream_t stream);

// Keeps the stream busy for about `microseconds` (one thread reading the
// GPU's global timer): what TimeRuns (time_runs.h) enqueues ahead of a timed
// run, so that the host's enqueueing of the run lies inside the delay and
// not inside the timed span.
cudaError_t LaunchDelay(int microseconds, cudaStream_t stream);

// ---- reductions (reduce_kernels.cu) ----

// Sums `in` viewed as [outer, size, inner] over the middle dim into
// out[outer, inner]; mean divides by `size` (an empty sum's mean is NaN).
// Float32 accumulates in float, float64 (or any float64 operand) in double,
// int64 in int64.
cudaError_t LaunchReduceMiddle(DType out_dtype, DType in_dtype, int64_t outer, int64_t size, int64_t inner, bool mean,
                               const void* in, void* out, cudaStream_t stream);

// The general case: out has `kept` layout (its own contiguous order, offsets
// into `in` given by kept.strides) and each output element sums the
// `reduced` sub-space (offsets by reduced.strides).
cudaError_t LaunchReduceGeneral(DType out_dtype, DType in_dtype, int64_t out_n, const StridedOperand& kept,
                                const StridedOperand& reduced, bool mean, const void* in, void* out,
                                cudaStream_t stream);

// ---- the loss path (loss_kernels.cu) ----

// log_softmax over the middle dim of [outer, size, inner].
cudaError_t LaunchLogSoftmax(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* in, void* out,
                             cudaStream_t stream);
// grad_in = grad - exp(output) * sum(grad over the middle dim); grad_in may
// be grad.
cudaError_t LaunchLogSoftmaxBackward(DType dtype, int64_t outer, int64_t size, int64_t inner, const void* grad,
                                     const void* output, void* grad_in, cudaStream_t stream);

struct NllParams {
  int64_t rows = 0;     // N (1 for a [C] self)
  int64_t classes = 0;  // C
  int reduction = 1;    // 0 none, 1 mean, 2 sum
  int64_t ignore_index = -100;
  ErrorWord error;
};
// Outputs: loss ([rows] for none, else one element) and total_weight (one
// element). weight may be null. `dtype`: float32, float64, bfloat16 or
// float16 (16-bit values are summed in float32 and rounded once, as
// PyTorch's opmath does); `target`: int64 or int32 labels.
cudaError_t LaunchNllLossForward(DType dtype, const NllParams& params, const void* self, IndexOperand target,
                                 const void* weight, void* loss, void* total_weight, cudaStream_t stream);
// grad_input [rows, classes], fully written.
cudaError_t LaunchNllLossBackward(DType dtype, const NllParams& params, const void* grad_output, IndexOperand target,
                                  const void* total_weight, const void* weight, void* grad_input, cudaStream_t stream);

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_LAUNCH_H_
