// A fuzzer's LLVMFuzzerTestOneInput driven without libFuzzer: every file of
// the given corpus folders (or files), then --random=N inputs made by
// mutating them, from --seed. This is CI's short run of each harness (with
// any compiler, no coverage guidance), and the way to replay a crash
// (`graph_fuzzer_replay crash-1234`). The coverage-guided runs are the
// libFuzzer binaries of the fuzz preset (fuzz/run.sh).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One to eight random edits of `input`: bit flips, byte sets, inserted,
// erased or repeated ranges, truncation.
std::string Mutate(std::string input, std::mt19937_64& rng, size_t max_len) {
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const size_t n = input.size();
    switch (rng() % 6) {
      case 0:
        if (n > 0) input[rng() % n] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (n > 0) input[rng() % n] = static_cast<char>(rng());
        break;
      case 2: {
        std::string bytes(1 + rng() % 16, '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        input.insert(n > 0 ? rng() % (n + 1) : 0, bytes);
        break;
      }
      case 3:
        if (n > 0) {
          const size_t at = rng() % n;
          input.erase(at, 1 + rng() % std::min<size_t>(16, n - at));
        }
        break;
      case 4:
        if (n > 0) {
          const size_t at = rng() % n;
          input.insert(rng() % (n + 1), input.substr(at, 1 + rng() % std::min<size_t>(32, n - at)));
        }
        break;
      case 5:
        if (n > 0) input.resize(rng() % n);
        break;
    }
  }
  if (input.size() > max_len) input.resize(max_len);
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  long random = 0;
  uint64_t seed = 1;
  size_t max_len = 4096;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--random=", 0) == 0) {
      random = std::atol(arg.c_str() + 9);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--max_len=", 0) == 0) {
      max_len = std::strtoull(arg.c_str() + 10, nullptr, 10);
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) corpus.push_back(ReadAll(entry.path()));
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      corpus.push_back(ReadAll(arg));
    } else {
      std::fprintf(stderr, "usage: %s [--random=N] [--seed=S] [--max_len=L] CORPUS_DIR_OR_FILE...\n", argv[0]);
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& input : corpus) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::mt19937_64 rng(seed);
  for (long i = 0; i < random; ++i) {
    std::string input;
    if (!corpus.empty() && rng() % 4 != 0) {
      input = Mutate(corpus[rng() % corpus.size()], rng, max_len);
    } else {
      input.resize(rng() % 256);
      for (char& c : input) c = static_cast<char>(rng());
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu corpus inputs and %ld mutated ones in %.1f s, no crash\n", corpus.size(), random, seconds);
  return 0;
}
