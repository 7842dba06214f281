// Choices made once per device and shared by all its streams, process-wide:
// the cuBLASLt algorithm of a matrix product (blas.cc) and the cuDNN
// algorithm and engine of a convolution direction (conv_algorithms.cc). The
// first stream to meet a problem chooses; the others find its choice.
#ifndef TANDEM_KERNELS_CUDA_DEVICE_CHOICES_H_
#define TANDEM_KERNELS_CUDA_DEVICE_CHOICES_H_

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tandem::cuda {

// Thread-safe.
template <typename Key, typename Value>
class DeviceChoices {
 public:
  // The choice `device` keeps for `key`, if any.
  std::optional<Value> Find(int device, const Key& key) {
    absl::MutexLock lock(&mu_);
    auto it = choices_.find(std::make_pair(device, key));
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }

  // Keeps the first choice put for (device, key) (another stream may have
  // chosen meanwhile) and returns the one kept.
  Value Put(int device, const Key& key, const Value& value) {
    absl::MutexLock lock(&mu_);
    return choices_.emplace(std::make_pair(device, key), value).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<int, Key>, Value> choices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::cuda

#endif  // TANDEM_KERNELS_CUDA_DEVICE_CHOICES_H_
