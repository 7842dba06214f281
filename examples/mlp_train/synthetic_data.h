// A synthetic, learnable classification dataset and the MLP's initial
// weights, both determined by a seed.
//
// Samples are Gaussian blobs: class c has a random center in the input
// space (fixed by the seed), and a sample is its center plus unit noise.
// Different `stream`s draw different samples of the same distribution
// (training and held-out data). Weights follow
// PyTorch's nn.Linear default (uniform in +-1/sqrt(fan_in)). The generator
// is spelled out (splitmix64 + Box-Muller) so that any implementation, in
// any language, can reproduce the same numbers.
#ifndef TANDEM_EXAMPLES_MLP_TRAIN_SYNTHETIC_DATA_H_
#define TANDEM_EXAMPLES_MLP_TRAIN_SYNTHETIC_DATA_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::examples {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Normal() {
    double u1 = Uniform(), u2 = Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

struct MlpShape {
  int inputs = 64;
  int hidden = 128;
  int layers = 2;  // hidden layers
  int classes = 10;

  // Widths of every layer boundary: inputs, hidden x layers, classes.
  std::vector<int> Widths() const {
    std::vector<int> w{inputs};
    for (int i = 0; i < layers; ++i) w.push_back(hidden);
    w.push_back(classes);
    return w;
  }
};

class BlobDataset {
 public:
  // Spread of the class centers relative to the unit noise, per input
  // dimension: centers lie about 4 noise deviations apart whatever the
  // number of inputs, so the classes overlap a little and learning takes a
  // while.
  static constexpr double kCenterSpread = 3.0;

  BlobDataset(const MlpShape& shape, uint64_t seed, uint64_t stream = 0)
      : shape_(shape), rng_(seed ^ 0xDA7A5E7ull ^ (stream * 0x9E3779B97F4A7C15ull)) {
    SplitMix64 centers_rng(seed ^ 0xC3A7E25ull);
    centers_.resize(static_cast<size_t>(shape.classes) * shape.inputs);
    const double scale = kCenterSpread / std::sqrt(static_cast<double>(shape.inputs));
    for (double& c : centers_) c = scale * centers_rng.Normal();
  }

  // Fills x [batch, inputs] and y [batch] with the next batch.
  void NextBatch(int batch, std::vector<float>* x, std::vector<int64_t>* y) {
    x->resize(static_cast<size_t>(batch) * shape_.inputs);
    y->resize(batch);
    for (int i = 0; i < batch; ++i) {
      int64_t label = static_cast<int64_t>(rng_.Next() % static_cast<uint64_t>(shape_.classes));
      (*y)[i] = label;
      for (int j = 0; j < shape_.inputs; ++j) {
        (*x)[static_cast<size_t>(i) * shape_.inputs + j] =
            static_cast<float>(centers_[label * shape_.inputs + j] + rng_.Normal());
      }
    }
  }

 private:
  MlpShape shape_;
  SplitMix64 rng_;
  std::vector<double> centers_;
};

// Initial weights: for each layer, W [in, out] then b [out], row-major.
inline std::vector<std::vector<float>> InitialWeights(const MlpShape& shape, uint64_t seed) {
  SplitMix64 rng(seed ^ 0x1417ull);
  std::vector<int> w = shape.Widths();
  std::vector<std::vector<float>> params;
  for (size_t l = 0; l + 1 < w.size(); ++l) {
    double bound = 1.0 / std::sqrt(static_cast<double>(w[l]));
    std::vector<float> weight(static_cast<size_t>(w[l]) * w[l + 1]);
    for (float& v : weight) v = static_cast<float>((2 * rng.Uniform() - 1) * bound);
    std::vector<float> bias(w[l + 1]);
    for (float& v : bias) v = static_cast<float>((2 * rng.Uniform() - 1) * bound);
    params.push_back(std::move(weight));
    params.push_back(std::move(bias));
  }
  return params;
}

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MLP_TRAIN_SYNTHETIC_DATA_H_
