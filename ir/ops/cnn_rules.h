// Geometry of the CNN ops, shared by the op registry and every backend's
// kernels: attribute parsing and output sizes of 2-D and 3-D convolution
// (NCHW, NCDHW, or channels-last NHWC) and of 2-D pooling over NCHW tensors,
// adaptive pooling windows, the [N, C, *] (or channels-last [*, C]) channel
// split of batch norm, and the output_mask of the backward ops.
//
// Channels-last (attribute channels_last = true, which the layout pass
// compiler/channels_last.h sets): a 2-D convolution's input, output and
// weight, and their gradients, are stored with the channel dim last: input
// [N, H, W, C], weight [O, kH, kW, C / groups], output [N, oH, oW, O]; the
// tensors' shapes say so. A 1x1 kernel's weight may also be given as
// [O, C / groups, 1, 1], the same bytes (and its gradient then comes out
// so). A batch norm's channel dim is the last one.
//
// The rules follow ATen's: a list attribute of one int stands for every
// spatial dim; a pooling `stride` that is absent or empty is the kernel
// size; pooling padding must be at most half the kernel size; every output
// dim must be at least 1. Plain functions without state; thread-safe.
// Errors are INVALID_ARGUMENT messages naming the attribute or input; the
// registry prefixes the op.
#ifndef TANDEM_IR_OPS_CNN_RULES_H_
#define TANDEM_IR_OPS_CNN_RULES_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/dtype.h"

namespace tandem {

// Convolutions have 2 or 3 spatial dims (NCHW or NCDHW); the arrays below
// hold them in order ((D,) H, W), entries past `spatial` unused.
inline constexpr int kMaxConvSpatial = 3;

struct ConvParams {
  int spatial = 2;
  bool channels_last = false;  // 2-D only: [N, H, W, C] tensors
  int64_t stride[kMaxConvSpatial] = {1, 1, 1};
  int64_t padding[kMaxConvSpatial] = {0, 0, 0};
  int64_t dilation[kMaxConvSpatial] = {1, 1, 1};
  int64_t groups = 1;
};

// A 2-D or 3-D convolution: input [n, c, *in], weight [o, c / groups, *k],
// output [n, o, *out].
struct ConvGeometry {
  int spatial = 2;
  int64_t n = 0, c = 0, o = 0;
  int64_t in[kMaxConvSpatial] = {1, 1, 1};
  int64_t k[kMaxConvSpatial] = {1, 1, 1};
  int64_t out[kMaxConvSpatial] = {1, 1, 1};
  ConvParams params;

  // The tensors' shapes, in their storage order (channels-last or not).
  Shape input_shape() const;
  Shape weight_shape() const;
  Shape output_shape() const;
  // The same dims in channels-first order ([N, C, H, W] ...), whatever the
  // storage: what cuDNN's descriptors take along with the strides.
  Shape input_dims() const;
  Shape weight_dims() const;
  Shape output_dims() const;
  // Elements of one channel of the input and of the output, and taps of one
  // filter channel.
  int64_t in_plane() const;
  int64_t out_plane() const;
  int64_t kernel_volume() const;
};

// The spatial rank of a convolution input: 2 for [N, C, H, W], 3 for
// [N, C, D, H, W]; an error naming the input otherwise.
absl::StatusOr<int> ConvSpatialRank(const Shape& input);

// stride, padding, dilation (each one int or `spatial` ints), groups,
// channels_last (2-D only; default false); transposed must be false (transposed convolutions are not supported);
// output_padding, which only a transposed convolution uses, must be a list of
// non-negative ints when present.
absl::StatusOr<ConvParams> ParseConvParams(const Attrs& attrs, int spatial);

// Checks input (rank spatial + 2), weight (the same rank) and the params
// against each other.
absl::StatusOr<ConvGeometry> ConvGeometryOf(const ConvParams& params, const Shape& input, const Shape& weight);

// ConvSpatialRank, ParseConvParams and ConvGeometryOf in one.
absl::StatusOr<ConvGeometry> ParseConvGeometry(const Attrs& attrs, const Shape& input, const Shape& weight);

// A list attribute of `count` spatial entries, each at most 2^31 - 1: one int
// stands for all of them; `fallback` when absent (or, with
// `empty_means_fallback`, empty).
absl::StatusOr<std::vector<int64_t>> GetSpatialInts(const Attrs& attrs, absl::string_view name, int count,
                                                    std::optional<std::vector<int64_t>> fallback,
                                                    bool empty_means_fallback = false);

enum class PoolKind { kMax, kAvg };

struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
  int64_t divisor_override = 0;   // average pooling only; 0: none
  bool channels_last = false;     // [N, H, W, C] input and output (rank 4 only)
};

// kernel_size, stride, padding, ceil_mode, channels_last, and dilation (max)
// or count_include_pad and divisor_override (average).
absl::StatusOr<Pool2dParams> ParsePool2dParams(const Attrs& attrs, PoolKind kind);

// A pooling input viewed as `planes` planes of h x w (planes = N * C for
// [N, C, H, W], C for [C, H, W]); the output planes are oh x ow. A
// channels-last input [N, H, W, C] interleaves its C planes of each image.
struct Pool2dGeometry {
  int64_t planes = 0, h = 0, w = 0;
  int64_t oh = 0, ow = 0;
  Pool2dParams params;
  // The output's shape, in the input's storage order.
  Shape output_shape(const Shape& input) const;
};

// Checks the input (rank 3 or 4) against the params.
absl::StatusOr<Pool2dGeometry> Pool2dShape(const Pool2dParams& params, const Shape& input);

// `input` with its last two dims replaced by (oh, ow).
Shape PooledShape(const Shape& input, int64_t oh, int64_t ow);

// One output size of ATen's pooling: floor (or ceil) of
// (in + 2 * pad - dilation * (kernel - 1) - 1) / stride, plus 1, less one
// when ceil mode would start the last window past the input and its left
// padding.
int64_t PoolOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode);

// adaptive_avg_pool2d's output_size: two positive ints (one stands for
// both).
absl::StatusOr<std::array<int64_t, 2>> ParseAdaptiveOutputSize(const Attrs& attrs);

// Adaptive pooling window of output index `o` of `out` over `in` inputs:
// [floor(o * in / out), ceil((o + 1) * in / out)).
inline int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
inline int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// A batch-norm input [N, C, *] as [outer = N, channels = C, inner = prod(*)]
// (rank >= 2); channels-last [*, C] as [outer = prod(*), channels = C,
// inner = 1]. Both visit a channel's elements in the same order (N, then
// the spatial dims), so sums over them agree bit for bit.
struct ChannelSplit {
  int64_t outer = 1, channels = 1, inner = 1;
  int64_t per_channel() const { return outer * inner; }
};
ChannelSplit SplitChannels(const Shape& shape, bool channels_last = false);
// The channel dim of a batch-norm input: 1, or the last with channels_last.
inline size_t ChannelDim(const Shape& shape, bool channels_last) { return channels_last ? shape.size() - 1 : 1; }

// Whether a channels-last convolution's `weight` is a 1x1 kernel's given
// channels-first ([O, C / groups, 1, 1] for `input` [N, H, W, C]).
bool IsChannelsFirst1x1(const Shape& weight, const Shape& input, int64_t groups);

// The permutations between channels-first and channels-last storage of a
// rank-`rank` tensor: [0, 2, ..., rank - 1, 1] and its inverse.
std::vector<int64_t> ToChannelsLast(size_t rank);
std::vector<int64_t> ToChannelsFirst(size_t rank);
// `shape` permuted by `perm` (shape[perm[i]] at i).
Shape Permuted(const Shape& shape, const std::vector<int64_t>& perm);

// A backward op's output_mask: three 0/1 ints (or bools), all true when
// absent. An output whose entry is false has the shape [0] and is not
// computed.
absl::StatusOr<std::array<bool, 3>> ParseOutputMask(const Attrs& attrs);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_CNN_RULES_H_
