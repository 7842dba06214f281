#include "tests/mlp_reference.h"

#include <algorithm>
#include <cmath>

namespace tandem::testing {

std::vector<double> ReferenceMlpLosses(const MlpReferenceOptions& o, int iterations) {
  const std::vector<int> w = o.shape.Widths();
  const int L = static_cast<int>(w.size()) - 1;
  const int n = o.batch;
  std::vector<std::vector<float>> init = examples::InitialWeights(o.shape, o.seed);
  std::vector<std::vector<double>> W(L), B(L), mW(L), mB(L);
  for (int l = 0; l < L; ++l) {
    W[l].assign(init[2 * l].begin(), init[2 * l].end());
    B[l].assign(init[2 * l + 1].begin(), init[2 * l + 1].end());
    mW[l].assign(W[l].size(), 0.0);
    mB[l].assign(B[l].size(), 0.0);
  }
  examples::BlobDataset data(o.shape, o.seed);
  std::vector<float> xf;
  std::vector<int64_t> y;
  std::vector<double> losses;
  const double lr = static_cast<float>(o.lr);  // the daemon sees lr as float32
  const double momentum = o.momentum;
  for (int it = 0; it < iterations; ++it) {
    data.NextBatch(n, &xf, &y);
    // Forward: acts[l] is the input of layer l, [n, w[l]].
    std::vector<std::vector<double>> acts(L + 1);
    acts[0].assign(xf.begin(), xf.end());
    for (int l = 0; l < L; ++l) {
      std::vector<double>& out = acts[l + 1];
      out.assign(static_cast<size_t>(n) * w[l + 1], 0.0);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < w[l + 1]; ++j) {
          double s = B[l][j];
          for (int k = 0; k < w[l]; ++k) s += acts[l][i * w[l] + k] * W[l][k * w[l + 1] + j];
          out[i * w[l + 1] + j] = (l + 1 < L) ? std::max(0.0, s) : s;
        }
      }
    }
    // Softmax cross-entropy, mean over the batch.
    const int C = w[L];
    std::vector<double> grad(static_cast<size_t>(n) * C);
    double loss = 0;
    for (int i = 0; i < n; ++i) {
      const double* z = &acts[L][i * C];
      double m = *std::max_element(z, z + C);
      double sum = 0;
      for (int c = 0; c < C; ++c) sum += std::exp(z[c] - m);
      double lse = m + std::log(sum);
      loss += lse - z[y[i]];
      for (int c = 0; c < C; ++c) grad[i * C + c] = (std::exp(z[c] - lse) - (c == y[i] ? 1.0 : 0.0)) / n;
    }
    losses.push_back(loss / n);
    // Backward and update, last layer first.
    for (int l = L - 1; l >= 0; --l) {
      std::vector<double> gW(W[l].size(), 0.0), gB(B[l].size(), 0.0);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < w[l + 1]; ++j) {
          double g = grad[i * w[l + 1] + j];
          gB[j] += g;
          for (int k = 0; k < w[l]; ++k) gW[k * w[l + 1] + j] += acts[l][i * w[l] + k] * g;
        }
      }
      if (l > 0) {
        std::vector<double> gin(static_cast<size_t>(n) * w[l], 0.0);
        for (int i = 0; i < n; ++i) {
          for (int k = 0; k < w[l]; ++k) {
            if (acts[l][i * w[l] + k] <= 0) continue;  // relu
            double s = 0;
            for (int j = 0; j < w[l + 1]; ++j) s += grad[i * w[l + 1] + j] * W[l][k * w[l + 1] + j];
            gin[i * w[l] + k] = s;
          }
        }
        grad = std::move(gin);
      }
      for (size_t q = 0; q < W[l].size(); ++q) {
        mW[l][q] = momentum * mW[l][q] + gW[q];
        W[l][q] -= lr * mW[l][q];
      }
      for (size_t q = 0; q < B[l].size(); ++q) {
        mB[l][q] = momentum * mB[l][q] + gB[q];
        B[l][q] -= lr * mB[l][q];
      }
    }
  }
  return losses;
}

}  // namespace tandem::testing
