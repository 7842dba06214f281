// Copies between a contiguous tensor and a strided view of another
// (ir/ops/index_rules.h's StridedView), moving elements as fixed-width bytes
// so that one kernel serves every dtype: the CPU kernels of the strided ops
// (as_strided, diagonal, flip, repeat, the slice/select/as_strided
// scatters). kernels/cpu only; header-only; stateless.
#ifndef TANDEM_KERNELS_CPU_VIEW_COPY_H_
#define TANDEM_KERNELS_CPU_VIEW_COPY_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "ir/ops/index_rules.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {

// out (contiguous, of view.sizes) = `in` read through `view`.
inline absl::Status GatherView(const KernelArgs& args, DType dtype, const StridedView& view, const void* in,
                               void* out) {
  return DispatchElementBytes(args, dtype, [&](auto tag) {
    using E = decltype(tag);
    const E* x = static_cast<const E*>(in) + view.offset;
    E* y = static_cast<E*>(out);
    ForEachIndex<1>(view.sizes, {view.strides},
                    [&](int64_t i, const std::array<int64_t, 1>& off) { y[i] = x[off[0]]; });
    return absl::OkStatus();
  });
}

// `out` written through `view` = `in` (contiguous, of view.sizes), in
// row-major order of `in` (where the view overlaps itself, the last write
// wins).
inline absl::Status ScatterView(const KernelArgs& args, DType dtype, const StridedView& view, const void* in,
                                void* out) {
  return DispatchElementBytes(args, dtype, [&](auto tag) {
    using E = decltype(tag);
    const E* x = static_cast<const E*>(in);
    E* y = static_cast<E*>(out) + view.offset;
    ForEachIndex<1>(view.sizes, {view.strides},
                    [&](int64_t i, const std::array<int64_t, 1>& off) { y[off[0]] = x[i]; });
    return absl::OkStatus();
  });
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_VIEW_COPY_H_
