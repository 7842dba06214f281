// The rows of op_bench: one small Tandem graph per measured op, at the
// shapes of the reference models (fcn5, ResNet-50 and VGG-19 at batch 32,
// the 2-layer LSTM, a transformer encoder layer). bench/ops/torch_ops.py
// builds the same rows, under the same names, with PyTorch's own ops; the
// two lists must change together.
//
// A row is either compute-bound (matrix products and convolutions, rated in
// FLOP) or memory-bound (elementwise ops, reductions, normalizations, rated
// in bytes: the bytes of the inputs the op reads plus the bytes of the
// results it writes, each counted once). A row whose op needs inputs made
// by another op (max pooling's indices, batch norm's saved statistics) has
// a setup graph that is run once before timing; its values are copied into
// the row's feeds.
//
// Rows are plain values built on the host (no device memory); not
// thread-safe while being built.
#ifndef TANDEM_BENCH_OPS_OP_ROWS_H_
#define TANDEM_BENCH_OPS_OP_ROWS_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tests/gpu/gpu_test_util.h"

namespace tandem::bench {

// The sizes every row is derived from. Full() are the reference models';
// Small() are tiny versions for a quick run (torch_ops.py --small uses the
// same numbers).
struct OpBenchDims {
  // fcn5: 784-4096x4-10 MLP.
  int64_t fcn_batch = 256, fcn_inputs = 784, fcn_hidden = 4096, fcn_classes = 10;
  // ResNet-50 and VGG-19 on square images; VGG's first classifier layer.
  int64_t cnn_batch = 32, image = 224, vgg_hidden = 4096;
  // Transformer encoder layer.
  int64_t xf_batch = 32, xf_seq = 128, xf_model = 512, xf_heads = 8, xf_ff = 2048;
  // 2-layer LSTM language model (embedding width = hidden).
  int64_t lstm_batch = 64, lstm_seq = 35, lstm_hidden = 1024, lstm_vocab = 10000;
  // The device-to-device copy that sets the bandwidth reference.
  int64_t copy_bytes = int64_t{256} << 20;

  static OpBenchDims Full() { return OpBenchDims{}; }
  static OpBenchDims Small();
};

enum class RowKind {
  kCompute,  // rated in TFLOP/s
  kMemory,   // rated in GB/s against the copy bandwidth
};

const char* RowKindName(RowKind kind);  // "compute", "memory"

// How one feed of a row's graph is filled before timing.
struct FeedSpec {
  int value = -1;
  gpu_test::Fill fill = gpu_test::Fill::kUniform;
  int64_t labels_upper = 0;  // kLabels: int64 in [0, labels_upper)
};

struct OpRow {
  std::string name;    // e.g. "r50.layer1.conv2.bwd"; the key shared with torch_ops.py
  std::string op;      // the Tandem op timed (a chain of ops names itself; `shapes` lists them)
  std::string shapes;  // e.g. "x[32,64,56,56] w[64,64,3,3] s1 p1"
  RowKind kind = RowKind::kMemory;
  double flops = 0;  // compute rows: floating-point operations of one run
  double bytes = 0;  // memory rows: bytes read + bytes written by one run
  // How many independent copies of the op `graph` runs per iteration; times
  // are reported per copy. More than one for the ops that check their data
  // (embedding's ids): their iteration clears and reads back the job's error
  // word, a fixed cost that a training iteration pays once for all its ops,
  // not once per op.
  int ops_per_run = 1;

  gpu_test::GraphMaker graph;
  std::vector<FeedSpec> feeds;  // one per feed of `graph`

  std::optional<gpu_test::GraphMaker> setup;  // run once before timing
  std::vector<FeedSpec> setup_feeds;
  std::vector<std::pair<int, int>> setup_links;  // (value of setup, feed of graph) copied over
};

// Every row, in a fixed order. `allow_tf32` sets the node attribute
// "allow_tf32" on the convolution and convolution_backward nodes. Errors of
// the op registry (an op or attribute it rejects) are reported through
// gtest's failure printer by GraphMaker; callers check
// ::testing::UnitTest's ad-hoc result.
std::vector<OpRow> BuildOpRows(const OpBenchDims& dims, bool allow_tf32);

// Runs `row` (its setup first) once on the CPU oracle with random feeds:
// an error when a kernel fails or a float32 result holds a NaN or an
// infinity. Meant for Small() rows, on machines without a GPU.
absl::Status CheckRowOnCpu(const OpRow& row, std::mt19937_64& rng);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_OPS_OP_ROWS_H_
