// What a kernel sees: its node, and where its input and output tensors live.
//
// Kernels are per backend (kernels/cpu, kernels/cuda). Addresses are device
// addresses of the backend's device (host memory on the CPU backend). Inputs
// and outputs are contiguous row-major tensors of the types the registry
// inferred at registration, so kernels need not re-validate shapes; they
// must validate data (class labels, token ids, gather indices) and fail the
// iteration with INVALID_ARGUMENT instead of reading out of bounds.
#ifndef TANDEM_KERNELS_KERNEL_H_
#define TANDEM_KERNELS_KERNEL_H_

#include <vector>

#include "absl/status/status.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace tandem {

struct TensorArg {
  void* data = nullptr;
  TensorType type;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  int64_t numel() const { return type.numel(); }
};

struct KernelArgs {
  const Node* node = nullptr;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
};

}  // namespace tandem

#endif  // TANDEM_KERNELS_KERNEL_H_
