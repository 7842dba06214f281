// Algorithm searches below the lanes' priority (search_stream.h).
#include "kernels/cuda/search_stream.h"

#include "base/log.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {
namespace {

bool SearchBelowLanes() {
  static const bool below = !EnvIs("TANDEM_SEARCH_STREAM", "0");
  return below;
}

}  // namespace

SearchStream::~SearchStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (entered_ != nullptr) cudaEventDestroy(entered_);
  if (left_ != nullptr) cudaEventDestroy(left_);
}

absl::StatusOr<cudaStream_t> SearchStream::Enter(int ordinal, cudaStream_t work) {
  if (!SearchBelowLanes() || unused_) return work;
  if (stream_ == nullptr) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
    int least = 0, greatest = 0;  // CUDA: lower numbers are higher priorities
    CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    if (least == greatest) {
      unused_ = true;
      return work;
    }
    if (entered_ == nullptr) CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&entered_, cudaEventDisableTiming));
    if (left_ == nullptr) CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&left_, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, least));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(entered_, work));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, entered_, 0));
  return stream_;
}

absl::Status SearchStream::Leave(cudaStream_t work) {
  if (stream_ == nullptr || work == stream_) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(left_, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(work, left_, 0));
  return absl::OkStatus();
}

SearchScope::SearchScope(SearchStream& search, int ordinal, cudaStream_t work)
    : search_(search), work_(work), stream_(work) {
  absl::StatusOr<cudaStream_t> stream = search_.Enter(ordinal, work);
  if (stream.ok()) {
    stream_ = *stream;
  } else {
    cudaGetLastError();
    TLOG_WARNING("algorithm search stays on the lane's stream").With("status", stream.status().ToString());
  }
}

SearchScope::~SearchScope() {
  if (stream_ == work_) return;
  if (const absl::Status left = search_.Leave(work_); !left.ok()) {
    // The lane's later work could overtake the search's: wait for it here.
    cudaGetLastError();
    cudaStreamSynchronize(stream_);
    TLOG_WARNING("algorithm search: the lane did not wait for it on the device").With("status", left.ToString());
  }
}

}  // namespace tandem::cuda
