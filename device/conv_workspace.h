// How much workspace one cuDNN convolution may use on a device, shared by
// the convolution kernels (kernels/cuda/conv_algorithms.cc, which search for
// algorithms within it) and the daemon (server/service.cc, which keeps that
// much back per lane when it sizes the job memory).
//
// Default: 1/64 of the device's memory, between 256 MiB and 2 GiB (2 GiB
// on an H200). Why 2 GiB at the top: the fastest float32 backward-filter
// algorithm of VGG-19's 224x224 layers (cuDNN's non-fused Winograd, which
// PyTorch runs) transforms x and dy into about 1.8 GiB; with 1 GiB the
// choice fell to a 7.1 ms kernel against PyTorch's 4.3 ms.
// TANDEM_CUDNN_WORKSPACE_MIB in the daemon's environment sets it instead.
#ifndef TANDEM_DEVICE_CONV_WORKSPACE_H_
#define TANDEM_DEVICE_CONV_WORKSPACE_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace tandem::device {

inline constexpr uint64_t kMinConvWorkspaceBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxConvWorkspaceBytes = uint64_t{2} << 30;

// The default for a device of `capacity_bytes`, and with `env_mib` (the
// variable's value, nullptr when unset; a value that is not a positive
// number of MiB is ignored).
inline uint64_t ConvWorkspaceLimitBytes(uint64_t capacity_bytes, const char* env_mib) {
  if (env_mib != nullptr) {
    char* end = nullptr;
    const long long mib = std::strtoll(env_mib, &end, 10);
    if (end != env_mib && *end == '\0' && mib > 0) return static_cast<uint64_t>(mib) << 20;
  }
  return std::clamp(capacity_bytes / 64, kMinConvWorkspaceBytes, kMaxConvWorkspaceBytes);
}

inline uint64_t ConvWorkspaceLimitBytes(uint64_t capacity_bytes) {
  return ConvWorkspaceLimitBytes(capacity_bytes, std::getenv("TANDEM_CUDNN_WORKSPACE_MIB"));
}

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_CONV_WORKSPACE_H_
