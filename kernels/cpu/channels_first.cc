#include "kernels/cpu/channels_first.h"

#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "ir/graph.h"
#include "ir/ops/cnn_rules.h"

namespace tandem::cpu {
namespace {

// dst = src permuted: dst dim d is src dim perm[d] (rank 4, `size`-byte
// elements).
void PermuteBytes(const char* src, const Shape& src_shape, const std::vector<int64_t>& perm, size_t size, char* dst) {
  const Shape dst_shape = Permuted(src_shape, perm);
  int64_t src_strides[4];
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    src_strides[d] = stride;
    stride *= src_shape[d];
  }
  int64_t s[4];
  for (int d = 0; d < 4; ++d) s[d] = src_strides[perm[d]];
  int64_t i = 0;
  for (int64_t a = 0; a < dst_shape[0]; ++a) {
    for (int64_t b = 0; b < dst_shape[1]; ++b) {
      for (int64_t c = 0; c < dst_shape[2]; ++c) {
        for (int64_t d = 0; d < dst_shape[3]; ++d, ++i) {
          std::memcpy(dst + i * size, src + (a * s[0] + b * s[1] + c * s[2] + d * s[3]) * size, size);
        }
      }
    }
  }
}

}  // namespace

absl::Status RunChannelsFirst(const KernelArgs& args, CpuKernelFn kernel, const std::vector<bool>& keep_inputs,
                              const std::vector<bool>& keep_outputs) {
  ASSIGN_OR_RETURN(bool channels_last, args.node->attrs.GetBool("channels_last", false));
  if (!channels_last) return kernel(args);
  Node node = *args.node;
  node.attrs.Set("channels_last", false);
  KernelArgs first = args;
  first.node = &node;
  const std::vector<int64_t> to_first = ToChannelsFirst(4);
  std::vector<std::vector<char>> buffers;
  buffers.reserve(args.inputs.size() + args.outputs.size());
  const auto rebind = [&](TensorArg& t, const std::vector<bool>& keep, size_t i) {
    if (t.type.rank() != 4 || (i < keep.size() && keep[i])) return false;
    buffers.emplace_back(t.type.bytes());
    t.type.shape = Permuted(t.type.shape, to_first);
    t.data = buffers.back().data();
    return true;
  };
  for (size_t i = 0; i < first.inputs.size(); ++i) {
    if (rebind(first.inputs[i], keep_inputs, i)) {
      PermuteBytes(static_cast<const char*>(args.inputs[i].data), args.inputs[i].type.shape, to_first,
                   DTypeSize(args.inputs[i].type.dtype), static_cast<char*>(first.inputs[i].data));
    }
  }
  std::vector<bool> permuted(first.outputs.size());
  for (size_t o = 0; o < first.outputs.size(); ++o) permuted[o] = rebind(first.outputs[o], keep_outputs, o);
  RETURN_IF_ERROR(kernel(first));
  const std::vector<int64_t> to_last = ToChannelsLast(4);
  for (size_t o = 0; o < first.outputs.size(); ++o) {
    if (!permuted[o]) continue;
    PermuteBytes(static_cast<const char*>(first.outputs[o].data), first.outputs[o].type.shape, to_last,
                 DTypeSize(args.outputs[o].type.dtype), static_cast<char*>(args.outputs[o].data));
  }
  return absl::OkStatus();
}

}  // namespace tandem::cpu
