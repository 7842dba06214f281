// Channels-last nodes on the reference CPU kernels (kernels/cpu only).
//
// An op whose kernel knows only channels-first storage opts in with
// WithChannelsFirst<>: a node with attribute channels_last = true (the
// layout pass, compiler/channels_last.h) then runs that kernel on
// channels-first copies of its rank-4 tensors ([N, H, W, C] -> [N, C, H,
// W]) with the attribute cleared, and its rank-4 outputs are permuted back.
// The copies move bytes only, so the results are the channels-first
// kernel's bit for bit: the CPU reference of a channels-last node is its
// channels-first node.
//
// Stateless and thread-safe; the copies are allocated per call.
#ifndef TANDEM_KERNELS_CPU_CHANNELS_FIRST_H_
#define TANDEM_KERNELS_CPU_CHANNELS_FIRST_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tandem::cpu {

// `keep_inputs` / `keep_outputs` (when not empty) mark rank-4 tensors that
// are channels-first already (a convolution's 1x1 weight, cnn_rules.h).
absl::Status RunChannelsFirst(const KernelArgs& args, CpuKernelFn kernel, const std::vector<bool>& keep_inputs = {},
                              const std::vector<bool>& keep_outputs = {});

template <CpuKernelFn kKernel>
absl::Status WithChannelsFirst(const KernelArgs& args) {
  return RunChannelsFirst(args, kKernel);
}

}  // namespace tandem::cpu

#endif  // TANDEM_KERNELS_CPU_CHANNELS_FIRST_H_
