// Index maps of the resampling and padding ops, shared by the CPU kernels
// and the CUDA kernels so that both backends pick the same source elements
// bit for bit (the CPU backend is the GPU tests' oracle):
//   - upsample_nearest2d: src = min(floor(dst * scale), in - 1) in float32,
//     scale = 1 / scales (when given and positive) or in / out, as PyTorch's
//     CPU and CUDA kernels compute it (float32 whatever the tensor dtype);
//   - upsample_bilinear2d: PyTorch's area_pixel_compute_source_index in the
//     accumulation type A (float32 for float32 and 16-bit tensors, float64
//     for float64): align_corners: src = scale * dst with scale = (in - 1) /
//     (out - 1); else src = max(scale * (dst + 0.5) - 0.5, 0); then the
//     taps floor(src) (at most in - 1) and the next one (the same at the
//     edge), with weights 1 - lambda and lambda, lambda = src - floor(src);
//   - reflection and replication padding: the source position of an output
//     position, and the inverse (every output position that reads a given
//     input position), for the gathering backward kernels.
// Products and sums of the source index are rounded one by one on the
// device too (no fused multiply-add), so the device computes what the host
// does.
//
// Header-only, usable from host code and CUDA device code; stateless.
#ifndef TANDEM_IR_OPS_SPATIAL_INDEX_H_
#define TANDEM_IR_OPS_SPATIAL_INDEX_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_SPATIAL_HD __host__ __device__ __forceinline__
#else
#define TANDEM_SPATIAL_HD inline
#endif

namespace tandem::spatial {

// a * b and a + b, each rounded once, also where the CUDA compiler would
// fuse them into one multiply-add.
TANDEM_SPATIAL_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TANDEM_SPATIAL_HD double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TANDEM_SPATIAL_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TANDEM_SPATIAL_HD double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TANDEM_SPATIAL_HD float Floor(float v) {
#if defined(__CUDA_ARCH__)
  return floorf(v);
#else
  return std::floor(v);
#endif
}
TANDEM_SPATIAL_HD double Floor(double v) {
#if defined(__CUDA_ARCH__)
  return floor(v);
#else
  return std::floor(v);
#endif
}

// ---- scales (host side; the kernels receive them computed) ----

// PyTorch's compute_scales_value: 1 / scale when the op's scale argument is
// given and positive (`scale` <= 0 or NaN: not given), else in / out.
template <typename A>
inline A ResampleScale(int64_t in, int64_t out, double scale) {
  return scale > 0.0 ? static_cast<A>(1.0 / scale) : static_cast<A>(in) / static_cast<A>(out);
}

// PyTorch's area_pixel_compute_scale (bilinear).
template <typename A>
inline A LinearScale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  return ResampleScale<A>(in, out, scale);
}

// ---- nearest ----

TANDEM_SPATIAL_HD int64_t NearestSource(float scale, int64_t dst, int64_t in) {
  const int64_t src = static_cast<int64_t>(Floor(Mul(static_cast<float>(dst), scale)));
  return src < in - 1 ? src : in - 1;
}

// The first dst in [0, out] whose source is at least `target` (out when
// none): the destinations that read source s are [First(s), First(s + 1)).
// The estimate target / scale is off by a step or two at most; the walk
// settles it with the forward map itself, so the backward gathers exactly
// what the forward read.
TANDEM_SPATIAL_HD int64_t NearestFirstAtLeast(float scale, int64_t target, int64_t in, int64_t out) {
  if (target <= 0) return 0;
  if (target >= in) return out;
  double guess = scale > 0.0f ? static_cast<double>(target) / static_cast<double>(scale) : static_cast<double>(out);
  if (!(guess < static_cast<double>(out))) guess = static_cast<double>(out);
  int64_t d = guess > 0.0 ? static_cast<int64_t>(guess) : 0;
  while (d > 0 && NearestSource(scale, d - 1, in) >= target) --d;
  while (d < out && NearestSource(scale, d, in) < target) ++d;
  return d;
}

// ---- bilinear ----

template <typename A>
struct LinearTap {
  int64_t i0 = 0, i1 = 0;  // the two source positions (equal at the last one)
  A w0 = A(1), w1 = A(0);  // their weights: 1 - lambda, lambda
};

template <typename A>
TANDEM_SPATIAL_HD A LinearSource(A scale, int64_t dst, bool align_corners) {
  if (align_corners) return Mul(scale, static_cast<A>(dst));
  const A src = Add(Mul(scale, Add(static_cast<A>(dst), A(0.5))), A(-0.5));
  return src < A(0) ? A(0) : src;
}

// floor(src), at most in - 1.
template <typename A>
TANDEM_SPATIAL_HD int64_t LinearFloor(A scale, int64_t dst, int64_t in, bool align_corners) {
  const int64_t i0 = static_cast<int64_t>(Floor(LinearSource(scale, dst, align_corners)));
  return i0 < in - 1 ? i0 : in - 1;
}

template <typename A>
TANDEM_SPATIAL_HD LinearTap<A> LinearTapAt(A scale, int64_t dst, int64_t in, bool align_corners) {
  const A src = LinearSource(scale, dst, align_corners);
  LinearTap<A> t;
  t.i0 = static_cast<int64_t>(Floor(src));
  if (t.i0 > in - 1) t.i0 = in - 1;
  A lambda = Add(src, -static_cast<A>(t.i0));
  if (lambda < A(0)) lambda = A(0);
  if (lambda > A(1)) lambda = A(1);
  t.i1 = t.i0 < in - 1 ? t.i0 + 1 : t.i0;
  t.w1 = lambda;
  t.w0 = Add(A(1), -lambda);
  return t;
}

// The first dst in [0, out] whose LinearFloor is at least `target` (out
// when none). The destinations that read source s (as i0 or i1) are
// [LinearFirstAtLeast(s - 1), LinearFirstAtLeast(s + 1)).
template <typename A>
TANDEM_SPATIAL_HD int64_t LinearFirstAtLeast(A scale, int64_t target, int64_t in, int64_t out, bool align_corners) {
  if (target <= 0) return 0;
  if (target >= in) return out;
  const double s = static_cast<double>(scale);
  double guess = static_cast<double>(out);
  if (s > 0.0) guess = align_corners ? target / s : (target + 0.5) / s - 0.5;
  if (!(guess < static_cast<double>(out))) guess = static_cast<double>(out);
  int64_t d = guess > 0.0 ? static_cast<int64_t>(guess) : 0;
  while (d > 0 && LinearFloor(scale, d - 1, in, align_corners) >= target) --d;
  while (d < out && LinearFloor(scale, d, in, align_corners) < target) ++d;
  return d;
}

// The weight with which destination `dst` reads source `src`: w0 where i0
// is src, plus w1 where i1 is (both at the last source).
template <typename A>
TANDEM_SPATIAL_HD A LinearWeight(const LinearTap<A>& t, int64_t src) {
  A w = A(0);
  if (t.i0 == src) w = Add(w, t.w0);
  if (t.i1 == src) w = Add(w, t.w1);
  return w;
}

// ---- reflection and replication padding ----
// Output position o of a dim padded by `before` (and `after`) around `in`
// positions; reflection needs before, after < in (one reflection reaches
// every output), replication in >= 1.

TANDEM_SPATIAL_HD int64_t ReflectSource(int64_t o, int64_t before, int64_t in) {
  int64_t x = o - before;
  if (x < 0) x = -x;
  if (x >= in) x = 2 * (in - 1) - x;
  return x;
}

TANDEM_SPATIAL_HD int64_t ReplicateSource(int64_t o, int64_t before, int64_t in) {
  const int64_t x = o - before;
  return x < 0 ? 0 : (x >= in ? in - 1 : x);
}

// The output positions that read input position x: up to three ranges
// [begin, end), in ascending order.
struct PadPreimage {
  int count = 0;
  int64_t begin[3] = {0, 0, 0};
  int64_t end[3] = {0, 0, 0};
};

TANDEM_SPATIAL_HD PadPreimage ReflectPreimage(int64_t x, int64_t before, int64_t in, int64_t out) {
  PadPreimage p;
  if (x >= 1 && x <= before) {  // left of the input, mirrored
    p.begin[p.count] = before - x;
    p.end[p.count++] = before - x + 1;
  }
  p.begin[p.count] = x + before;
  p.end[p.count++] = x + before + 1;
  const int64_t right = before + 2 * (in - 1) - x;  // right of the input, mirrored
  if (x <= in - 2 && right < out) {
    p.begin[p.count] = right;
    p.end[p.count++] = right + 1;
  }
  return p;
}

TANDEM_SPATIAL_HD PadPreimage ReplicatePreimage(int64_t x, int64_t before, int64_t in, int64_t out) {
  PadPreimage p;
  p.count = 1;
  p.begin[0] = x == 0 ? 0 : x + before;
  p.end[0] = x == in - 1 ? out : x + before + 1;
  return p;
}

}  // namespace tandem::spatial

#undef TANDEM_SPATIAL_HD

#endif  // TANDEM_IR_OPS_SPATIAL_INDEX_H_
