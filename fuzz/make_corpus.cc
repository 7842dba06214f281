// Writes the fuzzers' seed corpus into OUT/<fuzzer>/: real requests (an MLP
// training step, a small CNN step, the other requests a client sends) for
// the request fuzzer, the sample config for the config fuzzer, and a few
// fixed byte strings for the structure-aware ones, whose every input is a
// valid sequence of choices. Built and run by the build: nothing binary is
// committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "client/graph_builder.h"
#include "examples/mlp_train/mlp_graph.h"
#include "tandem.pb.h"

namespace {

using tandem::client::AttrBool;
using tandem::client::AttrInt;
using tandem::client::AttrInts;
using tandem::client::GraphBuilder;
using tandem::client::HostTensor;
namespace v1 = tandem::v1;

void Write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string AsRequest(v1::Request r) { return r.SerializeAsString(); }

v1::RegisterJobRequest SmallCnn() {
  GraphBuilder b("cnn");
  std::string x = b.Feed("x", v1::FLOAT32, {2, 3, 8, 8});
  std::string w = b.Persistent("conv.weight", HostTensor::Floats({4, 3, 3, 3}, std::vector<float>(108, 0.1f)));
  std::string y = b.Op("convolution", {x, w},
                       {{"stride", AttrInts({1, 1})},
                        {"padding", AttrInts({1, 1})},
                        {"dilation", AttrInts({1, 1})},
                        {"groups", AttrInt(1)}});
  std::string r = b.Op("relu", {y});
  auto pooled =
      b.OpN("max_pool2d_with_indices", {r}, {{"kernel_size", AttrInts({2, 2})}, {"stride", AttrInts({2, 2})}}, 2);
  std::string flat = b.Op("view", {pooled[0]}, {{"size", AttrInts({2, 64})}});
  std::string s = b.Op("sum.dim_IntList", {flat}, {{"dim", AttrInts({1})}, {"keepdim", AttrBool(false)}});
  b.Fetch(s);
  return std::move(b).Build();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR SAMPLE_CONFIG\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  {
    tandem::examples::MlpJobOptions mlp;
    mlp.shape = {.inputs = 8, .hidden = 8, .layers = 1, .classes = 3};
    mlp.batch = 4;
    v1::Request r;
    *r.mutable_register_job() = tandem::examples::BuildMlpTrainingJob(mlp);
    Write(out / "request_fuzzer", "mlp", AsRequest(r));
    *r.mutable_register_job() = SmallCnn();
    Write(out / "request_fuzzer", "cnn", AsRequest(r));
    v1::Request hello;
    hello.mutable_hello()->set_protocol_version(1);
    hello.mutable_hello()->set_client_name("seed");
    Write(out / "request_fuzzer", "hello", AsRequest(hello));
    v1::Request run;
    run.mutable_run_iteration()->set_job_id(1);
    run.mutable_run_iteration()->add_fetches("loss");
    v1::Tensor* feed = run.mutable_run_iteration()->add_feeds();
    feed->mutable_spec()->set_name("x");
    feed->mutable_shared()->set_region_id(1);
    feed->mutable_shared()->set_bytes(64);
    Write(out / "request_fuzzer", "run", AsRequest(run));
  }
  {
    std::ifstream in(argv[2]);
    std::stringstream config;
    config << in.rdbuf();
    Write(out / "config_fuzzer", "sample", config.str());
    Write(out / "config_fuzzer", "flags", "--policy=fair\n--max_lanes\n4\n--config=/nonexistent\n");
  }
  std::mt19937_64 rng(2026);
  for (const char* fuzzer : {"graph_fuzzer", "fused_program_fuzzer"}) {
    for (int i = 0; i < 8; ++i) {
      std::string bytes(64 + 32 * i, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      Write(out / fuzzer, "seed" + std::to_string(i), bytes);
    }
  }
  return 0;
}
