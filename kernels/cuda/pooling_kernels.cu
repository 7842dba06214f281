// 2-D pooling on CUDA: a thread per output element for the forwards, a
// thread per input element for the backwards, which gather the gradients of
// the windows that contain the element (no atomics, so results are
// deterministic and need no zeroing pass). Sums accumulate in double. The
// window rules are the CPU kernels' (kernels/cpu/pooling_kernels.cc).
//
// bfloat16 and float16 run the same kernels (templated on the storage type)
// in float32 arithmetic, PyTorch's for these types: values widen exactly to
// float, sums and maxima are float32, and each result rounds once to
// nearest-even 16 bits when it is stored; max pooling's indices stay int64.
//
// Max pooling has a 32-bit path, taken whenever the tensors have fewer than
// 2^31 elements and the window arithmetic fits in int32 (always, for real
// layers): flat indices are split with precomputed multiply-shift dividers
// instead of 64-bit divisions, and the backward visits only the windows
// that can hold its element (at most ceil(((kernel - 1) * dilation + 1) /
// stride) per dim, 2 x 2 for 3x3 s2) instead of every kernel tap. The
// general 64-bit kernels remain for the rest. Both take channels-last
// tensors too ([N, H, W, C]: p.channels = C, the planes of an image
// interleaved; consecutive threads take consecutive channels of one
// position, so a warp's reads and writes are contiguous).
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/half_cnn_common.cuh"
#include "kernels/cuda/kernel_common.cuh"

namespace tandem::cuda {
namespace {

// The type sums run in for storage type T: double for float32 and float64
// (as the CPU kernels), float for the 16-bit types.
template <typename T>
using SumType = std::conditional_t<kIsHalfType<T>, float, double>;
// The type a max pooling compares in: T itself, float for the 16-bit types.
template <typename T>
using CompareType = std::conditional_t<kIsHalfType<T>, float, T>;

// Splits a flat index of [planes, rows, cols] into its parts.
struct PlaneIndex {
  int64_t plane, row, col;
};
__device__ __forceinline__ PlaneIndex Split(int64_t i, int64_t rows, int64_t cols) {
  PlaneIndex r;
  r.col = i % cols;
  const int64_t t = i / cols;
  r.row = t % rows;
  r.plane = t / rows;
  return r;
}

// The same for element i in storage order of a tensor of `p`'s layout:
// channels-first [planes, rows, cols], or channels-last [N, rows, cols, C]
// (plane n * C + c).
__device__ __forceinline__ PlaneIndex SplitStored(const PoolLaunchParams& p, int64_t i, int64_t rows, int64_t cols) {
  if (p.channels == 0) return Split(i, rows, cols);
  const int64_t c = i % p.channels;
  PlaneIndex r = Split(i / p.channels, rows, cols);  // plane = n
  r.plane = r.plane * p.channels + c;
  return r;
}

// Where element (row, col) of `plane` sits in a tensor of `p`'s layout with
// rows x cols planes.
__device__ __forceinline__ int64_t Stored(const PoolLaunchParams& p, int64_t plane, int64_t row, int64_t col,
                                          int64_t rows, int64_t cols) {
  if (p.channels == 0) return (plane * rows + row) * cols + col;
  const int64_t n = plane / p.channels;
  return ((n * rows + row) * cols + col) * p.channels + (plane - n * p.channels);
}

// Unsigned division by a divisor fixed at launch, as a multiply-high, an
// add and a shift: for 1 <= d < 2^31, with s = ceil(log2(d)) and
// m = floor(2^32 * (2^s - d) / d) + 1 (< 2^32), n / d == (umulhi(n, m) + n)
// >> s for every 0 <= n < 2^31 (the sum stays below 2^32).
class Divider32 {
 public:
  Divider32() = default;
  explicit Divider32(uint32_t divisor) : divisor_(divisor) {
    while ((uint64_t{1} << shift_) < divisor) ++shift_;
    multiplier_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift_) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t Div(uint32_t n) const { return (__umulhi(n, multiplier_) + n) >> shift_; }
  __device__ __forceinline__ uint32_t divisor() const { return divisor_; }

 private:
  uint32_t divisor_ = 1;
  uint32_t multiplier_ = 1;
  uint32_t shift_ = 0;
};

// PoolLaunchParams in int32, with the dividers the 32-bit max-pool kernels
// use (built by Geometry32 only when everything fits).
struct PoolGeometry32 {
  int32_t h, w, oh, ow;
  int32_t channels;  // channels-last: C (planes n * C + c interleaved); 0: channels-first
  int32_t kernel[2], stride[2], padding[2], dilation[2];
  int32_t in_total, out_total;  // planes * h * w, planes * oh * ow
  Divider32 div_w, div_h, div_ow, div_oh, div_c, div_stride[2], div_dilation[2];
};

// Element i (storage order) of a tensor of rows x cols planes in `g`'s
// layout: its row and column, and where its plane's element 0 is and how far
// apart its elements are (1, or C channels-last), so that element (r, q) of
// the same plane of another tensor of r_rows x r_cols planes sits at
// Base(r_rows, r_cols) + (r * r_cols + q) * step.
struct Position32 {
  int32_t row, col;
  uint32_t image;  // channels-first: the plane; channels-last: n
  int32_t channel;
  int32_t step;
  __device__ __forceinline__ int64_t Base(int32_t rows, int32_t cols) const {
    return step == 1 ? static_cast<int64_t>(image) * rows * cols
                     : static_cast<int64_t>(image) * rows * cols * step + channel;
  }
};
__device__ __forceinline__ Position32 Locate32(const PoolGeometry32& g, uint32_t i, const Divider32& div_cols,
                                               const Divider32& div_rows) {
  Position32 p;
  p.channel = 0;
  p.step = 1;
  if (g.channels > 0) {
    const uint32_t q = g.div_c.Div(i);
    p.channel = static_cast<int32_t>(i - q * static_cast<uint32_t>(g.channels));
    p.step = g.channels;
    i = q;
  }
  const uint32_t t = div_cols.Div(i);
  p.col = static_cast<int32_t>(i - t * div_cols.divisor());
  p.image = div_rows.Div(t);
  p.row = static_cast<int32_t>(t - p.image * div_rows.divisor());
  return p;
}

// Whether the 32-bit kernels may run `p`: element counts below 2^31, and
// every size and parameter (and the window span (kernel - 1) * dilation + 1
// and output size * stride) at most 2^29, so that no sum of three of them
// that the kernels form (window starts and ends, loop steps) leaves int32.
bool Fits32(const PoolLaunchParams& p) {
  constexpr int64_t kTotalLimit = (int64_t{1} << 31) - 1;
  constexpr int64_t kLimit = int64_t{1} << 29;
  if (p.planes * p.h * p.w > kTotalLimit || p.planes * p.oh * p.ow > kTotalLimit) return false;
  const int64_t in_size[2] = {p.h, p.w}, out_size[2] = {p.oh, p.ow};
  for (int d = 0; d < 2; ++d) {
    for (int64_t v : {in_size[d], out_size[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d]}) {
      if (v > kLimit) return false;
    }
    if ((p.kernel[d] - 1) * p.dilation[d] + 1 > kLimit || out_size[d] * p.stride[d] > kLimit) return false;
  }
  return true;
}

PoolGeometry32 Geometry32(const PoolLaunchParams& p) {
  PoolGeometry32 g;
  g.h = static_cast<int32_t>(p.h);
  g.w = static_cast<int32_t>(p.w);
  g.oh = static_cast<int32_t>(p.oh);
  g.ow = static_cast<int32_t>(p.ow);
  for (int d = 0; d < 2; ++d) {
    g.kernel[d] = static_cast<int32_t>(p.kernel[d]);
    g.stride[d] = static_cast<int32_t>(p.stride[d]);
    g.padding[d] = static_cast<int32_t>(p.padding[d]);
    g.dilation[d] = static_cast<int32_t>(p.dilation[d]);
    g.div_stride[d] = Divider32(static_cast<uint32_t>(p.stride[d]));
    g.div_dilation[d] = Divider32(static_cast<uint32_t>(p.dilation[d]));
  }
  g.in_total = static_cast<int32_t>(p.planes * p.h * p.w);
  g.out_total = static_cast<int32_t>(p.planes * p.oh * p.ow);
  g.div_w = Divider32(static_cast<uint32_t>(p.w));
  g.div_h = Divider32(static_cast<uint32_t>(p.h));
  g.div_ow = Divider32(static_cast<uint32_t>(p.ow));
  g.div_oh = Divider32(static_cast<uint32_t>(p.oh));
  g.channels = static_cast<int32_t>(p.channels);
  g.div_c = Divider32(static_cast<uint32_t>(p.channels > 0 ? p.channels : 1));
  return g;
}

// A thread per output (grid-stride): the window's taps in row-major order,
// a NaN wins, ties keep the first; the same rules as MaxPoolKernel below.
// Consecutive threads take consecutive outputs of a row, so a warp's reads
// cover a contiguous span of each input row it touches.
template <typename T>
__global__ void MaxPool32Kernel(PoolGeometry32 g, const T* x, T* y, int64_t* indices) {
  using V = CompareType<T>;
  const int32_t dh = g.dilation[0], dw = g.dilation[1];
  for (int64_t i = GlobalThread(); i < g.out_total; i += GlobalStride()) {
    const Position32 o = Locate32(g, static_cast<uint32_t>(i), g.div_ow, g.div_oh);
    const int32_t ox = o.col, oy = o.row;
    int32_t h0 = oy * g.stride[0] - g.padding[0];
    const int32_t h1 = min(h0 + (g.kernel[0] - 1) * dh + 1, g.h);
    while (h0 < 0) h0 += dh;
    int32_t w0 = ox * g.stride[1] - g.padding[1];
    const int32_t w1 = min(w0 + (g.kernel[1] - 1) * dw + 1, g.w);
    while (w0 < 0) w0 += dw;
    const T* in = x + o.Base(g.h, g.w);
    V best = -std::numeric_limits<V>::infinity();
    int64_t best_index = static_cast<int64_t>(h0) * g.w + w0;
    for (int32_t ih = h0; ih < h1; ih += dh) {
      const T* row = in + static_cast<int64_t>(ih) * g.w * o.step;
      for (int32_t iw = w0; iw < w1; iw += dw) {
        const V v = WidenTo<V>(row[static_cast<int64_t>(iw) * o.step]);
        if (v > best || isnan(v)) {
          best = v;
          best_index = static_cast<int64_t>(ih) * g.w + iw;
        }
      }
    }
    y[i] = RoundTo<T>(best);  // exact: a widened stored value (or -inf)
    indices[i] = best_index;
  }
}

// The output positions along one dim whose window has a tap at input
// position `pos`: o in [first, last] with pos + padding - o * stride in
// [0, (kernel - 1) * dilation]; with dilation > 1 only those where that
// offset is a multiple of the dilation are taps (Tap32 checks).
struct WindowRange {
  int32_t first, last;  // empty when first > last
};
__device__ __forceinline__ WindowRange WindowsWithTap32(int32_t pos, int32_t kernel, int32_t pad, int32_t dilation,
                                                        const Divider32& div_stride, int32_t out) {
  const int32_t stride = static_cast<int32_t>(div_stride.divisor());
  const int32_t top = pos + pad;  // >= 0
  const int32_t low = top - (kernel - 1) * dilation;
  WindowRange r;
  r.last = min(static_cast<int32_t>(div_stride.Div(static_cast<uint32_t>(top))), out - 1);
  r.first = low <= 0 ? 0 : static_cast<int32_t>(div_stride.Div(static_cast<uint32_t>(low + stride - 1)));
  return r;
}
__device__ __forceinline__ bool Tap32(int32_t pos, int32_t o, int32_t stride, int32_t pad, int32_t dilation,
                                      const Divider32& div_dilation) {
  if (dilation == 1) return true;
  const int32_t offset = pos + pad - o * stride;
  return static_cast<int32_t>(div_dilation.Div(static_cast<uint32_t>(offset))) * dilation == offset;
}

// A thread per input element (grid-stride): the sum (SumType) of the
// gradients of the windows that hold it as a tap and whose index names it.
// Windows are visited in the CPU kernel's order (kernel taps ascending, so
// output positions descending), which makes the sum bitwise the CPU's.
template <typename T>
__global__ void MaxPool32BackwardKernel(PoolGeometry32 g, const T* dy, const int64_t* indices, T* dx) {
  for (int64_t i = GlobalThread(); i < g.in_total; i += GlobalStride()) {
    const Position32 in = Locate32(g, static_cast<uint32_t>(i), g.div_w, g.div_h);
    const int32_t iw = in.col, ih = in.row;
    const int64_t self_index = static_cast<int64_t>(ih) * g.w + iw;
    const WindowRange rows = WindowsWithTap32(ih, g.kernel[0], g.padding[0], g.dilation[0], g.div_stride[0], g.oh);
    const WindowRange cols = WindowsWithTap32(iw, g.kernel[1], g.padding[1], g.dilation[1], g.div_stride[1], g.ow);
    const int64_t out_base = in.Base(g.oh, g.ow);
    SumType<T> sum = 0;
    for (int32_t oy = rows.last; oy >= rows.first; --oy) {
      if (!Tap32(ih, oy, g.stride[0], g.padding[0], g.dilation[0], g.div_dilation[0])) continue;
      const int64_t row = out_base + static_cast<int64_t>(oy) * g.ow * in.step;
      for (int32_t ox = cols.last; ox >= cols.first; --ox) {
        if (!Tap32(iw, ox, g.stride[1], g.padding[1], g.dilation[1], g.div_dilation[1])) continue;
        const int64_t at = row + static_cast<int64_t>(ox) * in.step;
        if (indices[at] == self_index) sum += WidenTo<SumType<T>>(dy[at]);
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

// The general kernels (64-bit indexing), for geometries Fits32 rejects.
template <typename T>
__global__ void MaxPoolKernel(PoolLaunchParams p, const T* x, T* y, int64_t* indices) {
  using V = CompareType<T>;
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = SplitStored(p, i, p.oh, p.ow);
    int64_t h0 = o.row * p.stride[0] - p.padding[0];
    const int64_t h1 = min(h0 + (p.kernel[0] - 1) * p.dilation[0] + 1, p.h);
    while (h0 < 0) h0 += p.dilation[0];
    int64_t w0 = o.col * p.stride[1] - p.padding[1];
    const int64_t w1 = min(w0 + (p.kernel[1] - 1) * p.dilation[1] + 1, p.w);
    while (w0 < 0) w0 += p.dilation[1];
    V best = -std::numeric_limits<V>::infinity();
    int64_t best_index = h0 * p.w + w0;
    for (int64_t ih = h0; ih < h1; ih += p.dilation[0]) {
      for (int64_t iw = w0; iw < w1; iw += p.dilation[1]) {
        const V v = WidenTo<V>(x[Stored(p, o.plane, ih, iw, p.h, p.w)]);
        if (v > best || isnan(v)) {
          best = v;
          best_index = ih * p.w + iw;
        }
      }
    }
    y[i] = RoundTo<T>(best);
    indices[i] = best_index;
  }
}

// The output position along one dim whose window has tap `k` at input
// position `i`, or -1.
__device__ __forceinline__ int64_t WindowWithTap(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                                                 int64_t out) {
  const int64_t t = i + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t o = t / stride;
  return o < out ? o : -1;
}

template <typename T>
__global__ void MaxPoolBackwardKernel(PoolLaunchParams p, const T* dy, const int64_t* indices, T* dx) {
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = SplitStored(p, i, p.h, p.w);
    const int64_t self_index = in.row * p.w + in.col;
    SumType<T> sum = 0;
    for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
      const int64_t oy = WindowWithTap(in.row, kh, p.stride[0], p.padding[0], p.dilation[0], p.oh);
      if (oy < 0) continue;
      for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
        const int64_t ox = WindowWithTap(in.col, kw, p.stride[1], p.padding[1], p.dilation[1], p.ow);
        if (ox < 0) continue;
        const int64_t at = Stored(p, in.plane, oy, ox, p.oh, p.ow);
        if (indices[at] == self_index) sum += WidenTo<SumType<T>>(dy[at]);
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

__device__ __forceinline__ AvgWindow AvgWindowAt(const PoolLaunchParams& p, int64_t oy, int64_t ox) {
  AvgWindow win;
  const int64_t hs = oy * p.stride[0] - p.padding[0];
  const int64_t ws = ox * p.stride[1] - p.padding[1];
  const int64_t he = min(hs + p.kernel[0], p.h + p.padding[0]);
  const int64_t we = min(ws + p.kernel[1], p.w + p.padding[1]);
  const int64_t padded_size = (he - hs) * (we - ws);
  win.h0 = max(hs, int64_t{0});
  win.w0 = max(ws, int64_t{0});
  win.h1 = min(he, p.h);
  win.w1 = min(we, p.w);
  if (p.divisor_override != 0) {
    win.divisor = static_cast<double>(p.divisor_override);
  } else if (p.count_include_pad) {
    win.divisor = static_cast<double>(padded_size);
  } else {
    win.divisor = static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
  }
  return win;
}

template <typename T>
__global__ void AvgPoolKernel(PoolLaunchParams p, const T* x, T* y) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = SplitStored(p, i, p.oh, p.ow);
    const AvgWindow win = AvgWindowAt(p, o.row, o.col);
    S sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += WidenTo<S>(x[Stored(p, o.plane, ih, iw, p.h, p.w)]);
    }
    const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
    y[i] = RoundTo<T>(empty ? S(0) : sum / static_cast<S>(win.divisor));
  }
}

template <typename T>
__global__ void AvgPoolBackwardKernel(PoolLaunchParams p, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = SplitStored(p, i, p.h, p.w);
    S sum = 0;
    for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
      const int64_t oy = WindowWithTap(in.row, kh, p.stride[0], p.padding[0], 1, p.oh);
      if (oy < 0) continue;
      for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
        const int64_t ox = WindowWithTap(in.col, kw, p.stride[1], p.padding[1], 1, p.ow);
        if (ox < 0) continue;
        const AvgWindow win = AvgWindowAt(p, oy, ox);
        if (in.row < win.h1 && in.col < win.w1) {
          sum += WidenTo<S>(dy[Stored(p, in.plane, oy, ox, p.oh, p.ow)]) / static_cast<S>(win.divisor);
        }
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

__device__ __forceinline__ int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
__device__ __forceinline__ int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void AdaptiveAvgPoolKernel(PoolLaunchParams p, const T* x, T* y) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex o = Split(i, p.oh, p.ow);
    const int64_t h0 = AdaptiveStart(o.row, p.h, p.oh), h1 = AdaptiveEnd(o.row, p.h, p.oh);
    const int64_t w0 = AdaptiveStart(o.col, p.w, p.ow), w1 = AdaptiveEnd(o.col, p.w, p.ow);
    const T* plane = x + o.plane * p.h * p.w;
    S sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) sum += WidenTo<S>(plane[ih * p.w + iw]);
    }
    y[i] = RoundTo<T>(sum / static_cast<S>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void AdaptiveAvgPoolBackwardKernel(PoolLaunchParams p, const T* dy, T* dx) {
  using S = SumType<T>;
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = GlobalThread(); i < total; i += GlobalStride()) {
    const PlaneIndex in = Split(i, p.h, p.w);
    const T* dy_plane = dy + in.plane * p.oh * p.ow;
    S sum = 0;
    const int64_t oy_end = min(AdaptiveEnd(in.row, p.oh, p.h) + 1, p.oh);
    const int64_t ox_end = min(AdaptiveEnd(in.col, p.ow, p.w) + 1, p.ow);
    for (int64_t oy = AdaptiveStart(in.row, p.oh, p.h); oy < oy_end; ++oy) {
      const int64_t h0 = AdaptiveStart(oy, p.h, p.oh), h1 = AdaptiveEnd(oy, p.h, p.oh);
      if (in.row < h0 || in.row >= h1) continue;
      for (int64_t ox = AdaptiveStart(in.col, p.ow, p.w); ox < ox_end; ++ox) {
        const int64_t w0 = AdaptiveStart(ox, p.w, p.ow), w1 = AdaptiveEnd(ox, p.w, p.ow);
        if (in.col < w0 || in.col >= w1) continue;
        sum += WidenTo<S>(dy_plane[oy * p.ow + ox]) / static_cast<S>((h1 - h0) * (w1 - w0));
      }
    }
    dx[i] = RoundTo<T>(sum);
  }
}

}  // namespace

cudaError_t LaunchMaxPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, int64_t* indices,
                            cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool fits32 = Fits32(p);
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (fits32) {
      MaxPool32Kernel<T><<<Blocks(total), kThreads, 0, stream>>>(Geometry32(p), static_cast<const T*>(x),
                                                                 static_cast<T*>(y), indices);
    } else {
      MaxPoolKernel<T>
          <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y), indices);
    }
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchMaxPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                    const int64_t* indices, void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool fits32 = Fits32(p);
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (fits32) {
      MaxPool32BackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(
          Geometry32(p), static_cast<const T*>(grad_output), indices, static_cast<T*>(grad_input));
    } else {
      MaxPoolBackwardKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), indices,
                                                                       static_cast<T*>(grad_input));
    }
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y, cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPoolKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output, void* grad_input,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AvgPoolBackwardKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool2d(DType dtype, const PoolLaunchParams& p, const void* x, void* y,
                                    cudaStream_t stream) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPoolKernel<T><<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(x), static_cast<T*>(y));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

cudaError_t LaunchAdaptiveAvgPool2dBackward(DType dtype, const PoolLaunchParams& p, const void* grad_output,
                                            void* grad_input, cudaStream_t stream) {
  const int64_t total = p.planes * p.h * p.w;
  if (total == 0) return cudaSuccess;
  const bool ok = DispatchFloatOrHalf(dtype, [&](auto tag) {
    using T = decltype(tag);
    AdaptiveAvgPoolBackwardKernel<T>
        <<<Blocks(total), kThreads, 0, stream>>>(p, static_cast<const T*>(grad_output), static_cast<T*>(grad_input));
  });
  return ok ? LaunchError() : cudaErrorInvalidValue;
}

}  // namespace tandem::cuda
