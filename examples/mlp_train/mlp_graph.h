// The training step of an MLP classifier as a Tandem job: forward (addmm +
// relu per hidden layer), log-softmax + NLL loss, the whole backward pass,
// and an SGD-with-momentum update written back to the persistent weights.
//
// Feeds: x float32[batch, inputs], y int64[batch], lr float32[] (so the
// learning rate can follow a schedule). Fetches: loss float32[], logits.
// Persistent: W<l> [in, out], b<l> [out], and their momentum buffers.
#ifndef TANDEM_EXAMPLES_MLP_TRAIN_MLP_GRAPH_H_
#define TANDEM_EXAMPLES_MLP_TRAIN_MLP_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/graph_builder.h"
#include "examples/mlp_train/synthetic_data.h"

namespace tandem::examples {

struct MlpJobOptions {
  MlpShape shape;
  int batch = 256;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string name = "mlp";
};

// Parameter names in InitialWeights order: W0, b0, W1, b1, ...
std::vector<std::string> MlpParameterNames(const MlpShape& shape);

v1::RegisterJobRequest BuildMlpTrainingJob(const MlpJobOptions& options);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MLP_TRAIN_MLP_GRAPH_H_
