// A graph pass that stores a convolution network's activations
// channels-last ([N, H, W, C]) instead of PyTorch's [N, C, H, W], so that
// cuDNN runs its NHWC tensor-core kernels directly instead of transposing
// around each convolution (2.2 ms of ResNet-50's 8.4 ms of convolution time
// at batch 32 on an H100 were cuDNN's own transposes; docs/codegen.md).
//
// The pass changes shapes, not the meaning of the graph: a channels-last
// value is a new value of the permuted shape, and every node that reads it
// is one that computes the same thing on that layout:
//
//   - 2-D convolution and convolution_backward (float32 and 16-bit) run
//     channels-last, except depthwise ones with a window over 5x5 (cuDNN's
//     NHWC kernels for those are slow: ConvNeXt's 7x7) (attribute channels_last = true): input, output and
//     their gradients [N, H, W, C]; the weight is read as [O, kH, kW, C / g]
//     (one permute of each weight per iteration, shared by the forward and
//     the backward) and its gradient permuted back for the optimizer right
//     after the backward (so the update's elementwise chain stays
//     channels-first and fused); a 1x1 kernel's weight, the same bytes in
//     either order, is read as it is and needs neither.
//   - batch norm forward and backward (channels_last = true: the channel
//     dim is the last), max and average pooling and their backward
//     (channels_last = true; indices stored alike), elementwise ops whose operands are rank-4 or single
//     elements, reductions over listed dims (sum.dim_IntList, mean.dim,
//     amax, amin) whose kept dims stay in order, expand, cat and slice
//     (their dims remapped) run channels-last when one of their rank-4
//     operands was computed channels-last (expand: or relayouts for free,
//     below). A value merely relaid out does not count: a weight's
//     channels-last copy leaves its optimizer update channels-first.
//     Elementwise covers the comparisons, where, masked_fill, _to_copy and
//     the math family, so that an activation's decomposed backward
//     (Hardswish's masks) stays in the layout.
//     A lower-rank broadcast operand of such an op follows as a view of its
//     rank-4 form where that relays out for free (a layer scale [C, 1, 1],
//     a row [W]).
//   - The network's own permutes between [N, C, H, W] and [N, H, W, C]
//     (ConvNeXt's and Swin's around a LayerNorm): to [N, H, W, C], of a
//     value computed channels-last, is a view of its twin; back to
//     [N, C, H, W] makes the result's twin a view of the input, computed
//     channels-last for its readers.
//   - A constant (zeros, ones, full, their *_like forms, fill.Scalar) reads
//     no data: it becomes a `full` of the layout of its first reader of
//     each kind, made where that reader is (SiLU's backward `1 -
//     sigmoid(x)` costs no relayout).
//   - Every other node reads channels-first values: a permute back is
//     inserted before its first such reader (once per value), and so for a
//     fetched or updated value, which keeps its name and layout.
//
// A relayout between the two is a `permute` node, or a `view` when it moves
// no bytes (C == 1 or H * W == 1, e.g. a pooled [N, C, 1, 1] or a 1x1
// convolution's weight). Channels-first values keep their names; a value's
// channels-last twin is named `<name>.channels_last`.
//
// Run before fold_activations (whose folded batch norms keep the
// attribute) and fuse_elementwise (elementwise ops do not care about the
// layout). The CPU kernels of the channels-last nodes are the
// channels-first kernels on permuted copies (kernels/cpu/channels_first.h),
// so a channels-last graph computes what the source graph computes; the
// daemon runs the pass when its option channels_last says so (auto, the
// default: for GPUs; docs/codegen.md), and with auto keeps the source
// graph where the rewrite's ChannelsLastRelayoutShare is over a limit
// (CompileJob): a network that moves its channels itself (ConvNeXt's own
// permutes around its LayerNorms, ShuffleNet's channel shuffle) pays more
// in permutes than cuDNN's NHWC kernels save. A graph without a 2-D
// convolution is returned as it is. Deterministic; a plain function.
#ifndef TANDEM_COMPILER_CHANNELS_LAST_H_
#define TANDEM_COMPILER_CHANNELS_LAST_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem {

// The rewritten graph (compiler/graph_rewriter.h).
absl::StatusOr<Graph> ChannelsLast(const Graph& graph);

// In a graph the pass rewrote: the bytes its relayout permutes read for
// values other than weights and weight gradients (activations and their
// gradients, the image), over the bytes its convolutions read and write
// (input and output activations). What the layout costs per iteration
// against what it is for. Of torchvision's models (captured at 64x64):
// ResNet-50, DenseNet-121, MobileNetV2, RegNetY-400MF and GoogLeNet relay
// out only the image (0.007-0.019); ConvNeXt-T 2.27, ShuffleNetV2 0.86 and
// DeepLabV3-MobileNetV3 0.31, which ran 14-28% slower channels-last.
double ChannelsLastRelayoutShare(const Graph& graph);

}  // namespace tandem

#endif  // TANDEM_COMPILER_CHANNELS_LAST_H_
