// An independent double-precision implementation of mlp_train's training
// step (forward, log-softmax + NLL loss, backward, SGD with momentum), used
// to check the losses that the daemon computes.
#ifndef TANDEM_TESTS_MLP_REFERENCE_H_
#define TANDEM_TESTS_MLP_REFERENCE_H_

#include <vector>

#include "examples/mlp_train/synthetic_data.h"

namespace tandem::testing {

struct MlpReferenceOptions {
  examples::MlpShape shape;
  int batch = 32;
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 1;
};

// The loss of each of `iterations` training steps.
std::vector<double> ReferenceMlpLosses(const MlpReferenceOptions& options, int iterations);

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_MLP_REFERENCE_H_
