#include "ir/ops/cnn_rules.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"
#include "base/status_macros.h"

namespace tandem {
namespace {

constexpr int64_t kMaxWindowParam = 2147483647;

// A 2-D list attribute: one int stands for both dims; `fallback` when
// absent (or, with `empty_means_fallback`, empty).
absl::StatusOr<std::array<int64_t, 2>> GetPair(const Attrs& attrs, absl::string_view name,
                                               std::optional<std::array<int64_t, 2>> fallback,
                                               bool empty_means_fallback = false) {
  std::optional<std::vector<int64_t>> fallback_list;
  if (fallback.has_value()) fallback_list = std::vector<int64_t>{(*fallback)[0], (*fallback)[1]};
  ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.GetInts(name, fallback_list));
  if (v.empty() && empty_means_fallback && fallback.has_value()) return *fallback;
  // Bounded as cuDNN's int parameters are, so that the geometry's sums
  // and products of them stay far from overflowing.
  for (int64_t x : v) {
    if (x > kMaxWindowParam) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' has ", x, "; entries must be at most ", kMaxWindowParam));
    }
  }
  if (v.size() == 1) return std::array<int64_t, 2>{v[0], v[0]};
  if (v.size() == 2) return std::array<int64_t, 2>{v[0], v[1]};
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' is [", absl::StrJoin(v, ", "), "]; expected one or two ints (2-D only)"));
}

absl::Status RequireAtLeast(absl::string_view name, const std::array<int64_t, 2>& v, int64_t min) {
  if (v[0] >= min && v[1] >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' is [", v[0], ", ", v[1], "]; each must be at least ", min));
}

absl::Status RequireAtLeast(absl::string_view name, const std::vector<int64_t>& v, int64_t min) {
  for (int64_t x : v) {
    if (x < min) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' is [", absl::StrJoin(v, ", "), "]; each must be at least ", min));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> GetSpatialInts(const Attrs& attrs, absl::string_view name, int count,
                                                    std::optional<std::vector<int64_t>> fallback,
                                                    bool empty_means_fallback) {
  ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.GetInts(name, fallback));
  if (v.empty() && empty_means_fallback && fallback.has_value()) v = *fallback;
  for (int64_t x : v) {
    if (x > kMaxWindowParam) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name, "' has ", x, "; entries must be at most ", kMaxWindowParam));
    }
  }
  if (v.size() == 1) return std::vector<int64_t>(static_cast<size_t>(count), v[0]);
  if (static_cast<int>(v.size()) == count) return v;
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' is [", absl::StrJoin(v, ", "),
                                                 "]; expected one or ", count, " ints (", count, "-D)"));
}

Shape ConvGeometry::input_dims() const {
  Shape s = {n, c};
  s.insert(s.end(), in, in + spatial);
  return s;
}

Shape ConvGeometry::weight_dims() const {
  Shape s = {o, c / params.groups};
  s.insert(s.end(), k, k + spatial);
  return s;
}

Shape ConvGeometry::output_dims() const {
  Shape s = {n, o};
  s.insert(s.end(), out, out + spatial);
  return s;
}

namespace {
Shape Stored(const Shape& dims, bool channels_last) {
  return channels_last ? Permuted(dims, ToChannelsLast(dims.size())) : dims;
}
}  // namespace

bool IsChannelsFirst1x1(const Shape& weight, const Shape& input, int64_t groups) {
  return weight.size() == 4 && input.size() == 4 && weight[2] == 1 && weight[3] == 1 && groups > 0 &&
         weight[1] * groups == input[3];
}

Shape ConvGeometry::input_shape() const { return Stored(input_dims(), params.channels_last); }
Shape ConvGeometry::weight_shape() const { return Stored(weight_dims(), params.channels_last); }
Shape ConvGeometry::output_shape() const { return Stored(output_dims(), params.channels_last); }

std::vector<int64_t> ToChannelsLast(size_t rank) {
  std::vector<int64_t> perm = {0};
  for (size_t d = 2; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
  if (rank > 1) perm.push_back(1);
  return perm;
}

std::vector<int64_t> ToChannelsFirst(size_t rank) {
  std::vector<int64_t> perm = {0};
  if (rank > 1) perm.push_back(static_cast<int64_t>(rank) - 1);
  for (size_t d = 1; d + 1 < rank; ++d) perm.push_back(static_cast<int64_t>(d));
  return perm;
}

Shape Permuted(const Shape& shape, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = shape[static_cast<size_t>(perm[i])];
  return out;
}

int64_t ConvGeometry::in_plane() const { return in[0] * in[1] * in[2]; }
int64_t ConvGeometry::out_plane() const { return out[0] * out[1] * out[2]; }
int64_t ConvGeometry::kernel_volume() const { return k[0] * k[1] * k[2]; }

absl::StatusOr<int> ConvSpatialRank(const Shape& input) {
  if (input.size() == 4 || input.size() == 5) return static_cast<int>(input.size()) - 2;
  return absl::InvalidArgumentError(absl::StrCat(
      "input is ", ShapeString(input), "; expected [N, C, H, W] or [N, C, D, H, W] (2-D or 3-D convolution)"));
}

absl::StatusOr<ConvParams> ParseConvParams(const Attrs& attrs, int spatial) {
  ConvParams p;
  p.spatial = spatial;
  const auto all = [&](int64_t v) { return std::vector<int64_t>(static_cast<size_t>(spatial), v); };
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, GetSpatialInts(attrs, "stride", spatial, all(1)));
  ASSIGN_OR_RETURN(std::vector<int64_t> padding, GetSpatialInts(attrs, "padding", spatial, all(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> dilation, GetSpatialInts(attrs, "dilation", spatial, all(1)));
  RETURN_IF_ERROR(RequireAtLeast("stride", stride, 1));
  RETURN_IF_ERROR(RequireAtLeast("padding", padding, 0));
  RETURN_IF_ERROR(RequireAtLeast("dilation", dilation, 1));
  ASSIGN_OR_RETURN(p.groups, attrs.GetInt("groups", 1));
  if (p.groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'groups' is ", p.groups, "; must be at least 1"));
  }
  ASSIGN_OR_RETURN(bool transposed, attrs.GetBool("transposed", false));
  if (transposed) {
    return absl::InvalidArgumentError("transposed convolutions are not supported (attribute 'transposed' is true)");
  }
  ASSIGN_OR_RETURN(p.channels_last, attrs.GetBool("channels_last", false));
  if (p.channels_last && spatial != 2) {
    return absl::InvalidArgumentError("attribute 'channels_last' is for 2-D convolutions only");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> output_padding, attrs.GetInts("output_padding", std::vector<int64_t>{}));
  for (int64_t v : output_padding) {
    if (v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'output_padding' has ", v, "; entries must be non-negative"));
    }
  }
  for (int d = 0; d < spatial; ++d) {
    p.stride[d] = stride[d];
    p.padding[d] = padding[d];
    p.dilation[d] = dilation[d];
  }
  return p;
}

absl::StatusOr<ConvGeometry> ConvGeometryOf(const ConvParams& params, const Shape& stored_input,
                                            const Shape& stored_weight) {
  const int spatial = params.spatial;
  const size_t rank = static_cast<size_t>(spatial) + 2;
  const char* const dims = spatial == 3 ? "D, H, W" : "H, W";
  if (stored_input.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input is ", ShapeString(stored_input), "; expected ",
        params.channels_last ? "[N, H, W, C]" : absl::StrCat("[N, C, ", dims, "]"), " (", spatial, "-D convolution)"));
  }
  if (stored_weight.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight is ", ShapeString(stored_weight), "; expected ",
        params.channels_last
            ? "[out_channels, kH, kW, in_channels / groups]"
            : absl::StrCat("[out_channels, in_channels / groups, ", spatial == 3 ? "kD, kH, kW" : "kH, kW", "]")));
  }
  // From here on, channels-first dims.
  const Shape input = params.channels_last ? Permuted(stored_input, ToChannelsFirst(rank)) : stored_input;
  // A 1x1 kernel's weight is the same bytes in either order: channels-last
  // convolutions take it as [O, C / groups, 1, 1] too.
  const bool weight_first = !params.channels_last || IsChannelsFirst1x1(stored_weight, stored_input, params.groups);
  const Shape weight = weight_first ? stored_weight : Permuted(stored_weight, ToChannelsFirst(rank));
  ConvGeometry g;
  g.spatial = spatial;
  g.params = params;
  g.n = input[0];
  g.c = input[1];
  g.o = weight[0];
  if (g.o % params.groups != 0 || g.c % params.groups != 0 || weight[1] != g.c / params.groups || g.o == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input is ", ShapeString(input), " and weight is ", ShapeString(weight), " with groups=", params.groups,
        "; expected weight [O, C / groups, ", spatial == 3 ? "kD, kH, kW" : "kH, kW",
        "] with O > 0 a multiple of groups and C = ", weight[1], " * ", params.groups));
  }
  for (int d = 0; d < spatial; ++d) {
    g.in[d] = input[2 + d];
    g.k[d] = weight[2 + d];
    if (g.k[d] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight is ", ShapeString(weight), "; kernel dims must be positive"));
    }
  }
  for (int d = 0; d < spatial; ++d) {
    // A kernel dim comes from a (bounded) tensor, dilation and padding from
    // attributes of at most kMaxWindowParam: the product is checked.
    const std::optional<int64_t> dilated = CheckedMul(params.dilation[d], g.k[d] - 1);
    if (!dilated.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("weight is ", ShapeString(weight), " with dilation ",
                                                     params.dilation[d], ": the dilated kernel is too large"));
    }
    const int64_t span = *dilated + 1;
    const int64_t padded = g.in[d] + 2 * params.padding[d];
    g.out[d] = padded >= span ? (padded - span) / params.stride[d] + 1 : 0;
    if (g.out[d] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("input is ", ShapeString(input), ": spatial dim ", d,
                                                     " padded to ", padded, " is smaller than the dilated kernel (",
                                                     span, "); the output would be empty"));
    }
  }
  return g;
}

absl::StatusOr<ConvGeometry> ParseConvGeometry(const Attrs& attrs, const Shape& input, const Shape& weight) {
  ASSIGN_OR_RETURN(int spatial, ConvSpatialRank(input));
  ASSIGN_OR_RETURN(ConvParams params, ParseConvParams(attrs, spatial));
  return ConvGeometryOf(params, input, weight);
}

int64_t PoolOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  const int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division (the numerator can be negative for a too-small input).
  int64_t out = numerator >= 0 ? numerator / stride : -((-numerator + stride - 1) / stride);
  out += 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

absl::StatusOr<Pool2dParams> ParsePool2dParams(const Attrs& attrs, PoolKind kind) {
  Pool2dParams p;
  ASSIGN_OR_RETURN(auto kernel, GetPair(attrs, "kernel_size", std::nullopt));
  RETURN_IF_ERROR(RequireAtLeast("kernel_size", kernel, 1));
  ASSIGN_OR_RETURN(auto stride, GetPair(attrs, "stride", kernel, /*empty_means_fallback=*/true));
  RETURN_IF_ERROR(RequireAtLeast("stride", stride, 1));
  ASSIGN_OR_RETURN(auto padding, GetPair(attrs, "padding", std::array<int64_t, 2>{0, 0}));
  RETURN_IF_ERROR(RequireAtLeast("padding", padding, 0));
  std::array<int64_t, 2> dilation = {1, 1};
  if (kind == PoolKind::kMax) {
    ASSIGN_OR_RETURN(dilation, GetPair(attrs, "dilation", std::array<int64_t, 2>{1, 1}));
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
  ASSIGN_OR_RETURN(p.channels_last, attrs.GetBool("channels_last", false));
  for (int d = 0; d < 2; ++d) {
    if (padding[d] > kernel[d] / 2) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'padding' is [", padding[0], ", ", padding[1],
                                                     "] and kernel_size is [", kernel[0], ", ", kernel[1],
                                                     "]; padding must be at most half the kernel size"));
    }
    p.kernel[d] = kernel[d];
    p.stride[d] = stride[d];
    p.padding[d] = padding[d];
    p.dilation[d] = dilation[d];
  }
  return p;
}

absl::StatusOr<Pool2dGeometry> Pool2dShape(const Pool2dParams& params, const Shape& input) {
  if (params.channels_last && input.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", ShapeString(input), "; expected [N, H, W, C]"));
  }
  if (input.size() != 3 && input.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("self is ", ShapeString(input), "; expected [N, C, H, W] or [C, H, W]"));
  }
  Pool2dGeometry g;
  g.params = params;
  const size_t r = input.size();
  const size_t first = params.channels_last ? 1 : r - 2;  // H's dim
  g.h = input[first];
  g.w = input[first + 1];
  g.planes = params.channels_last ? input[0] * input[3] : 1;
  for (size_t d = 0; !params.channels_last && d + 2 < r; ++d) g.planes *= input[d];
  g.oh =
      PoolOutputSize(g.h, params.kernel[0], params.stride[0], params.padding[0], params.dilation[0], params.ceil_mode);
  g.ow =
      PoolOutputSize(g.w, params.kernel[1], params.stride[1], params.padding[1], params.dilation[1], params.ceil_mode);
  if (g.h < 1 || g.w < 1 || g.oh < 1 || g.ow < 1) {
    return absl::InvalidArgumentError(absl::StrCat("self is ", ShapeString(input), ": the pooled output would be ",
                                                   g.oh, " x ", g.ow, "; it must not be empty"));
  }
  return g;
}

Shape Pool2dGeometry::output_shape(const Shape& input) const {
  if (params.channels_last) return {input[0], oh, ow, input[3]};
  return PooledShape(input, oh, ow);
}

Shape PooledShape(const Shape& input, int64_t oh, int64_t ow) {
  Shape out = input;
  out[out.size() - 2] = oh;
  out[out.size() - 1] = ow;
  return out;
}

absl::StatusOr<std::array<int64_t, 2>> ParseAdaptiveOutputSize(const Attrs& attrs) {
  ASSIGN_OR_RETURN(auto size, GetPair(attrs, "output_size", std::nullopt));
  RETURN_IF_ERROR(RequireAtLeast("output_size", size, 1));
  return size;
}

ChannelSplit SplitChannels(const Shape& shape, bool channels_last) {
  ChannelSplit s;
  if (shape.size() < 2) return s;
  if (channels_last) {
    for (size_t d = 0; d + 1 < shape.size(); ++d) s.outer *= shape[d];
    s.channels = shape.back();
    return s;
  }
  s.outer = shape[0];
  s.channels = shape[1];
  for (size_t d = 2; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

absl::StatusOr<std::array<bool, 3>> ParseOutputMask(const Attrs& attrs) {
  ASSIGN_OR_RETURN(std::vector<int64_t> mask, attrs.GetInts("output_mask", std::vector<int64_t>{1, 1, 1}));
  if (mask.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'output_mask' is [", absl::StrJoin(mask, ", "), "]; expected three 0/1 entries"));
  }
  return std::array<bool, 3>{mask[0] != 0, mask[1] != 0, mask[2] != 0};
}

}  // namespace tandem
