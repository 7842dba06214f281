// Geometry of the spatial ops, shared by the op registry and every backend's
// kernels: group normalization's [N, C, HxW] split, resampling
// (upsample_nearest2d, upsample_bilinear2d and their .vec and backward
// forms), constant, reflection and replication padding, and 3-D pooling
// (avg_pool3d, max_pool3d_with_indices, _adaptive_avg_pool3d).
//
// The rules follow ATen's (PyTorch 1.13 and 2.x): a list attribute of one
// int stands for every spatial dim; a pooling `stride` that is absent or
// empty is the kernel size; pooling padding must be at most half the kernel
// size; resampled and pooled sizes must be at least 1. Plain functions
// without state; thread-safe. Errors are INVALID_ARGUMENT messages naming
// the attribute or input; the registry prefixes the op.
#ifndef TANDEM_IR_OPS_SPATIAL_RULES_H_
#define TANDEM_IR_OPS_SPATIAL_RULES_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/ops/cnn_rules.h"

namespace tandem {

// ---- group normalization ----

// native_group_norm's input [N, C, *] as N x C x HxW with `groups` groups of
// C / groups channels; its N, C, HxW and group attributes must agree with
// the input's shape.
struct GroupNormGeometry {
  int64_t n = 0, c = 0, hxw = 1, groups = 1;
  int64_t channels_per_group() const { return c / groups; }
  // Elements of one (image, group) row: C / groups * HxW.
  int64_t row() const { return channels_per_group() * hxw; }
};
absl::StatusOr<GroupNormGeometry> ParseGroupNorm(const Attrs& attrs, const Shape& input);

// ---- resampling ----

enum class ResampleMode { kNearest, kBilinear };

// Which form of an upsample op: the default overload (output_size plus
// optional scales_h and scales_w) or .vec (output_size or scale_factors).
enum class ResampleForm { kDefault, kVec };

// [N, C, H, W] resampled to [N, C, OH, OW]: planes = N * C. `scales` are the
// op's scale arguments as the kernels use them (PyTorch's scales_h,
// scales_w, or the .vec overload's scale_factors when it computes the
// output size from them); <= 0 means none (the kernels then use in / out).
struct ResampleGeometry {
  int64_t n = 0, c = 0;
  int64_t in[2] = {1, 1};
  int64_t out[2] = {1, 1};
  double scales[2] = {0.0, 0.0};
  bool align_corners = false;  // bilinear only

  int64_t planes() const { return n * c; }
  Shape input_shape() const { return {n, c, in[0], in[1]}; }
  Shape output_shape() const { return {n, c, out[0], out[1]}; }
};

// A forward op's geometry from its input [N, C, H, W] and attributes.
absl::StatusOr<ResampleGeometry> ParseUpsample(const Attrs& attrs, const Shape& input, ResampleMode mode,
                                               ResampleForm form);
// A backward op's: input_size (4 ints) gives the input; grad_output must
// have the forward's output shape.
absl::StatusOr<ResampleGeometry> ParseUpsampleBackward(const Attrs& attrs, const Shape& grad_output, ResampleMode mode,
                                                       ResampleForm form);

// ---- padding ----

enum class PadMode { kReflect, kReplicate };

// reflection_pad{1,2,3}d / replication_pad{2,3}d over the last `dims` dims
// of self (rank dims + 1 or dims + 2): `padding` holds (before, after)
// pairs from the last dim backwards. Viewed as `planes` volumes of (D, H,
// W), right-aligned: a padded dim the op lacks is 1 with no padding.
struct PadGeometry {
  int dims = 1;
  int64_t planes = 1;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t before[3] = {0, 0, 0};
  int64_t after[3] = {0, 0, 0};

  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out[0] * out[1] * out[2]; }
};
absl::StatusOr<PadGeometry> ParsePad(const Attrs& attrs, const Shape& self, int dims, PadMode mode);
// `self` with its last g.dims dims padded.
Shape PaddedShape(const Shape& self, const PadGeometry& g);

// constant_pad_nd(self, pad, value): `pad` holds (before, after) pairs from
// the last dim backwards, as many as it names (a negative entry crops);
// every output dim must be non-negative.
struct ConstantPadGeometry {
  Shape out;
  std::vector<int64_t> before;  // per dim of self (0 for dims `pad` leaves alone)
};
absl::StatusOr<ConstantPadGeometry> ParseConstantPad(const Attrs& attrs, const Shape& self);

// ---- 3-D pooling ----

struct Pool3dParams {
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
  int64_t divisor_override = 0;   // average pooling only; 0: none
};

// kernel_size, stride, padding, ceil_mode, and dilation (max) or
// count_include_pad and divisor_override (average); three ints each (one
// stands for all three).
absl::StatusOr<Pool3dParams> ParsePool3dParams(const Attrs& attrs, PoolKind kind);

// A 3-D pooling input [N, C, D, H, W] or [C, D, H, W] as `planes` volumes of
// in[0] x in[1] x in[2], pooled to out[0] x out[1] x out[2].
struct Pool3dGeometry {
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  Pool3dParams params;

  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out[0] * out[1] * out[2]; }
};

// Checks the input (rank 4 or 5) against the params.
absl::StatusOr<Pool3dGeometry> Pool3dShape(const Pool3dParams& params, const Shape& input);

// `input` with its last three dims replaced by `out`.
Shape Pooled3dShape(const Shape& input, const int64_t out[3]);

// _adaptive_avg_pool3d's output_size: three positive ints (one stands for
// all three).
absl::StatusOr<std::array<int64_t, 3>> ParseAdaptive3dOutputSize(const Attrs& attrs);

// The input of an adaptive 3-D pooling (rank 4 or 5, non-empty D, H, W)
// with the output's last three dims.
absl::StatusOr<Pool3dGeometry> Adaptive3dShape(const Shape& input, const Shape& output);

}  // namespace tandem

#endif  // TANDEM_IR_OPS_SPATIAL_RULES_H_
