#include "ir/ops/spatial_rules.h"

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

// Output sizes of resampling and padding: at most this (int32 range, as the
// window parameters of cnn_rules.cc), so sums and products of a few of them
// stay far from overflowing.
constexpr int64_t kMaxSize = 2147483647;

std::string ListString(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ", "), "]"); }

absl::Status RequireAtLeast(absl::string_view name, const std::vector<int64_t>& v, int64_t min) {
  for (int64_t x : v) {
    if (x < min) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' is ", ListString(v), "; each must be at least ", min));
    }
  }
  return absl::OkStatus();
}

// A scale argument the kernels can use: absent, not positive (ignored, as
// ATen ignores it), or one whose reciprocal is a finite float32.
absl::Status CheckScale(absl::string_view name, double scale) {
  if (!(scale > 0.0) || std::isfinite(static_cast<float>(1.0 / scale))) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' is ", scale, "; its reciprocal must be a finite float32"));
}

// The geometry of resampling `input` ([N, C, H, W], or input_size for a
// backward op) under the op's attributes.
absl::StatusOr<ResampleGeometry> Resolve(const Attrs& attrs, const Shape& input, absl::string_view input_name,
                                         ResampleMode mode, ResampleForm form) {
  if (input.size() != 4 || input[0] < 0 || input[1] < 0 || input[2] < 1 || input[3] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(input_name, " is ", ShapeString(input), "; expected [N, C, H, W] with H and W at least 1"));
  }
  ResampleGeometry g;
  g.n = input[0];
  g.c = input[1];
  g.in[0] = input[2];
  g.in[1] = input[3];
  if (mode == ResampleMode::kBilinear) {
    ASSIGN_OR_RETURN(g.align_corners, attrs.GetBool("align_corners"));
  }
  std::vector<int64_t> size;
  if (form == ResampleForm::kDefault) {
    ASSIGN_OR_RETURN(size, attrs.GetInts("output_size"));
    ASSIGN_OR_RETURN(g.scales[0], attrs.GetFloat("scales_h", 0.0));
    ASSIGN_OR_RETURN(g.scales[1], attrs.GetFloat("scales_w", 0.0));
    RETURN_IF_ERROR(CheckScale("scales_h", g.scales[0]));
    RETURN_IF_ERROR(CheckScale("scales_w", g.scales[1]));
  } else {
    const bool has_size = attrs.Has("output_size"), has_factors = attrs.Has("scale_factors");
    if (has_size == has_factors) {
      return absl::InvalidArgumentError("expected exactly one of the attributes 'output_size' and 'scale_factors'");
    }
    if (has_size) {
      ASSIGN_OR_RETURN(size, attrs.GetInts("output_size"));
    } else {
      ASSIGN_OR_RETURN(std::vector<double> factors, attrs.GetFloats("scale_factors"));
      if (factors.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("attribute 'scale_factors' has ", factors.size(), " entries; expected 2 (height, width)"));
      }
      for (int d = 0; d < 2; ++d) {
        // ATen's output size: floor(input size * scale factor).
        const double scaled = std::floor(static_cast<double>(g.in[d]) * factors[d]);
        if (!(scaled >= 1.0 && scaled <= static_cast<double>(kMaxSize))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "attribute 'scale_factors' is [", factors[0], ", ", factors[1], "]: ", input_name, " ",
              ShapeString(input), " would resample to ", scaled, " in dim ", d + 2, "; expected 1 to ", kMaxSize));
        }
        size.push_back(static_cast<int64_t>(scaled));
        g.scales[d] = factors[d];
        RETURN_IF_ERROR(CheckScale("scale_factors", factors[d]));
      }
    }
  }
  if (size.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'output_size' is ", ListString(size), "; expected 2 ints (height, width)"));
  }
  for (int d = 0; d < 2; ++d) {
    if (size[d] < 1 || size[d] > kMaxSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'output_size' is ", ListString(size), "; each must be in [1, ", kMaxSize, "]"));
    }
    g.out[d] = size[d];
  }
  if (!CheckedNumElements(g.output_shape()).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the output ", ShapeString(g.output_shape()), " has too many elements"));
  }
  return g;
}

}  // namespace

absl::StatusOr<GroupNormGeometry> ParseGroupNorm(const Attrs& attrs, const Shape& input) {
  GroupNormGeometry g;
  ASSIGN_OR_RETURN(g.n, attrs.GetInt("N"));
  ASSIGN_OR_RETURN(g.c, attrs.GetInt("C"));
  ASSIGN_OR_RETURN(g.hxw, attrs.GetInt("HxW"));
  ASSIGN_OR_RETURN(g.groups, attrs.GetInt("group"));
  int64_t spatial = 1;
  for (size_t d = 2; d < input.size(); ++d) spatial *= input[d];
  if (input.size() < 2 || input[0] != g.n || input[1] != g.c || spatial != g.hxw) {
    return absl::InvalidArgumentError(absl::StrCat("input is ", ShapeString(input), " but attributes N=", g.n,
                                                   ", C=", g.c, ", HxW=", g.hxw,
                                                   "; expected input [N, C, *] with HxW the product of *"));
  }
  if (g.c < 1 || g.hxw < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", ShapeString(input), "; expected at least one channel and one element per channel"));
  }
  if (g.groups < 1 || g.c % g.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'group' is ", g.groups, " but C is ", g.c, "; expected a positive divisor of C"));
  }
  return g;
}

absl::StatusOr<ResampleGeometry> ParseUpsample(const Attrs& attrs, const Shape& input, ResampleMode mode,
                                               ResampleForm form) {
  return Resolve(attrs, input, "input", mode, form);
}

absl::StatusOr<ResampleGeometry> ParseUpsampleBackward(const Attrs& attrs, const Shape& grad_output, ResampleMode mode,
                                                       ResampleForm form) {
  ASSIGN_OR_RETURN(std::vector<int64_t> input_size, attrs.GetInts("input_size"));
  for (int64_t v : input_size) {
    if (v > kMaxSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'input_size' is ", ListString(input_size), "; entries must be at most ", kMaxSize));
    }
  }
  if (!CheckedNumElements(input_size).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'input_size' is ", ListString(input_size), "; expected [N, C, H, W] of a tensor"));
  }
  ASSIGN_OR_RETURN(ResampleGeometry g, Resolve(attrs, input_size, "attribute 'input_size'", mode, form));
  if (grad_output != g.output_shape()) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is ", ShapeString(grad_output),
                                                   " but resampling input_size ", ListString(input_size), " gives ",
                                                   ShapeString(g.output_shape())));
  }
  return g;
}

absl::StatusOr<PadGeometry> ParsePad(const Attrs& attrs, const Shape& self, int dims, PadMode mode) {
  ASSIGN_OR_RETURN(std::vector<int64_t> padding, attrs.GetInts("padding"));
  if (static_cast<int>(padding.size()) != 2 * dims) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'padding' is ", ListString(padding), "; expected ",
                                                   2 * dims, " ints (before and after, from the last dim)"));
  }
  const int rank = static_cast<int>(self.size());
  if (rank != dims + 1 && rank != dims + 2) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", ShapeString(self), "; expected rank ", dims + 1, " or ",
                                                   dims + 2, " (", dims, "-D padding)"));
  }
  RETURN_IF_ERROR(RequireAtLeast("padding", padding, 0));
  PadGeometry g;
  g.dims = dims;
  for (int d = 0; d < rank - dims; ++d) g.planes *= self[d];
  for (int k = 0; k < dims; ++k) {  // k-th dim from the last
    const int slot = 2 - k;
    const int64_t in = self[rank - 1 - k];
    const int64_t before = padding[2 * k], after = padding[2 * k + 1];
    if (mode == PadMode::kReflect ? (before >= in || after >= in) : in < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("self is ", ShapeString(self), " and padding is ", ListString(padding), "; ",
                       mode == PadMode::kReflect ? "reflection padding must be smaller than the padded dim"
                                                 : "replication padding needs a non-empty padded dim",
                       " (dim ", rank - 1 - k, ")"));
    }
    if (before > kMaxSize || after > kMaxSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'padding' is ", ListString(padding), "; entries must be at most ", kMaxSize));
    }
    g.in[slot] = in;
    g.before[slot] = before;
    g.after[slot] = after;
    g.out[slot] = in + before + after;
  }
  if (!CheckedNumElements(PaddedShape(self, g)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the output ", ShapeString(PaddedShape(self, g)), " has too many elements"));
  }
  return g;
}

Shape PaddedShape(const Shape& self, const PadGeometry& g) {
  Shape out = self;
  const size_t rank = self.size();
  for (int k = 0; k < g.dims; ++k) out[rank - 1 - k] = g.out[2 - k];
  return out;
}

absl::StatusOr<ConstantPadGeometry> ParseConstantPad(const Attrs& attrs, const Shape& self) {
  ASSIGN_OR_RETURN(std::vector<int64_t> pad, attrs.GetInts("pad"));
  const int rank = static_cast<int>(self.size());
  if (pad.size() % 2 != 0 || static_cast<int>(pad.size()) > 2 * rank) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'pad' is ", ListString(pad), " and self is ",
                                                   ShapeString(self),
                                                   "; expected pairs (before, after) for at most every dim"));
  }
  ConstantPadGeometry g;
  g.out = self;
  g.before.assign(self.size(), 0);
  for (size_t k = 0; 2 * k < pad.size(); ++k) {
    const int d = rank - 1 - static_cast<int>(k);
    const std::optional<int64_t> grown = CheckedAdd(pad[2 * k], pad[2 * k + 1]);
    const std::optional<int64_t> size = grown.has_value() ? CheckedAdd(self[d], *grown) : std::nullopt;
    if (!size.has_value() || *size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("self is ", ShapeString(self), " and pad is ", ListString(pad), ": dim ", d, " would have size ",
                       size.has_value() ? absl::StrCat(*size) : "out of range", "; it must be non-negative"));
    }
    g.out[d] = *size;
    g.before[d] = pad[2 * k];
  }
  if (!CheckedNumElements(g.out).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("the output ", ShapeString(g.out), " has too many elements"));
  }
  return g;
}

absl::StatusOr<Pool3dParams> ParsePool3dParams(const Attrs& attrs, PoolKind kind) {
  Pool3dParams p;
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel, GetSpatialInts(attrs, "kernel_size", 3, std::nullopt));
  RETURN_IF_ERROR(RequireAtLeast("kernel_size", kernel, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride,
                   GetSpatialInts(attrs, "stride", 3, kernel, /*empty_means_fallback=*/true));
  RETURN_IF_ERROR(RequireAtLeast("stride", stride, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> padding, GetSpatialInts(attrs, "padding", 3, std::vector<int64_t>{0, 0, 0}));
  RETURN_IF_ERROR(RequireAtLeast("padding", padding, 0));
  std::vector<int64_t> dilation = {1, 1, 1};
  if (kind == PoolKind::kMax) {
    ASSIGN_OR_RETURN(dilation, GetSpatialInts(attrs, "dilation", 3, std::vector<int64_t>{1, 1, 1}));
    RETURN_IF_ERROR(RequireAtLeast("dilation", dilation, 1));
  } else {
    ASSIGN_OR_RETURN(p.count_include_pad, attrs.GetBool("count_include_pad", true));
    if (attrs.Has("divisor_override")) {
      ASSIGN_OR_RETURN(p.divisor_override, attrs.GetInt("divisor_override"));
      if (p.divisor_override == 0) {
        return absl::InvalidArgumentError("attribute 'divisor_override' is 0; it must be nonzero");
      }
    }
  }
  ASSIGN_OR_RETURN(p.ceil_mode, attrs.GetBool("ceil_mode", false));
  for (int d = 0; d < 3; ++d) {
    if (padding[d] > kernel[d] / 2) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'padding' is ", ListString(padding),
                                                     " and kernel_size is ", ListString(kernel),
                                                     "; padding must be at most half the kernel size"));
    }
    p.kernel[d] = kernel[d];
    p.stride[d] = stride[d];
    p.padding[d] = padding[d];
    p.dilation[d] = dilation[d];
  }
  return p;
}

absl::StatusOr<Pool3dGeometry> Pool3dShape(const Pool3dParams& params, const Shape& input) {
  if (input.size() != 4 && input.size() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", ShapeString(input), "; expected [N, C, D, H, W] or [C, D, H, W]"));
  }
  Pool3dGeometry g;
  g.params = params;
  const size_t r = input.size();
  g.planes = 1;
  for (size_t d = 0; d + 3 < r; ++d) g.planes *= input[d];
  bool empty = false;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = input[r - 3 + d];
    g.out[d] = PoolOutputSize(g.in[d], params.kernel[d], params.stride[d], params.padding[d], params.dilation[d],
                              params.ceil_mode);
    empty = empty || g.in[d] < 1 || g.out[d] < 1;
  }
  if (empty) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", ShapeString(input), ": the pooled output would be ",
                                                   g.out[0], " x ", g.out[1], " x ", g.out[2],
                                                   "; it must not be empty"));
  }
  return g;
}

Shape Pooled3dShape(const Shape& input, const int64_t out[3]) {
  Shape s = input;
  const size_t r = s.size();
  for (int d = 0; d < 3; ++d) s[r - 3 + d] = out[d];
  return s;
}

absl::StatusOr<std::array<int64_t, 3>> ParseAdaptive3dOutputSize(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> size, GetSpatialInts(attrs, "output_size", 3, std::nullopt));
  RETURN_IF_ERROR(RequireAtLeast("output_size", size, 1));
  return std::array<int64_t, 3>{size[0], size[1], size[2]};
}

absl::StatusOr<Pool3dGeometry> Adaptive3dShape(const Shape& input, const Shape& output) {
  const size_t r = input.size();
  if ((r != 4 && r != 5) || input[r - 1] < 1 || input[r - 2] < 1 || input[r - 3] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "self is ", ShapeString(input), "; expected [N, C, D, H, W] or [C, D, H, W] with non-empty D, H and W"));
  }
  Pool3dGeometry g;
  g.planes = 1;
  for (size_t d = 0; d + 3 < r; ++d) g.planes *= input[d];
  for (int d = 0; d < 3; ++d) {
    g.in[d] = input[r - 3 + d];
    g.out[d] = output.size() == r ? output[r - 3 + d] : 0;
  }
  return g;
}

}  // namespace tandem
