#include "server/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-ckpt-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static v1::JobCheckpoint Header() {
    v1::JobCheckpoint h;
    h.set_name("net");
    h.set_owner("uid-1000");
    h.set_resume_token(std::string(16, 'k'));
    h.set_iterations(12);
    v1::TensorSpec* w = h.add_persistent();
    w->set_name("w");
    w->set_dtype(v1::FLOAT32);
    w->add_shape(2);
    w->add_shape(3);
    v1::TensorSpec* b = h.add_persistent();
    b->set_name("b");
    b->set_dtype(v1::INT64);
    b->add_shape(2);
    return h;
  }
  // 24 + 16 bytes, every byte different from its neighbour.
  static std::string Data() {
    std::string d(40, '\0');
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<char>(i * 7 + 1);
    return d;
  }
  std::string Write() {
    const std::string path = CheckpointPath(dir_ + "/state", "uid-1000", "net");
    EXPECT_TRUE(WriteCheckpoint(path, Header(), Data()).ok());
    return path;
  }

  std::string dir_;
};

TEST_F(CheckpointFileTest, RoundTripsWithPrivateModes) {
  const std::string path = Write();
  EXPECT_EQ(path, dir_ + "/state/uid-1000/6e6574.ckpt");
  auto loaded = ReadCheckpoint(path, 1 << 20);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->header.name(), "net");
  EXPECT_EQ(loaded->header.iterations(), 12u);
  EXPECT_EQ(loaded->header.data_bytes(), 40u);
  ASSERT_EQ(loaded->frames->size(), 2u);
  EXPECT_EQ(loaded->frames->frame(0), Data().substr(0, 24));
  EXPECT_EQ(loaded->frames->frame(1), Data().substr(24, 16));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/state/uid-1000").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(CheckpointFileTest, DamagedFilesAreDataLossNeverAnOverread) {
  const std::string path = Write();
  const std::string whole = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto rewrite = [&](const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  };
  // Every truncation.
  for (size_t n = 0; n < whole.size(); ++n) {
    rewrite(whole.substr(0, n));
    EXPECT_EQ(ReadCheckpoint(path, 1 << 20).status().code(), absl::StatusCode::kDataLoss) << n << " bytes";
  }
  // Bytes appended, a wrong magic, a header length past the end.
  rewrite(whole + "x");
  EXPECT_EQ(ReadCheckpoint(path, 1 << 20).status().code(), absl::StatusCode::kDataLoss);
  std::string magic = whole;
  magic[0] = 'X';
  rewrite(magic);
  EXPECT_EQ(ReadCheckpoint(path, 1 << 20).status().code(), absl::StatusCode::kDataLoss);
  std::string length = whole;
  length[15] = '\x7f';
  rewrite(length);
  EXPECT_EQ(ReadCheckpoint(path, 1 << 20).status().code(), absl::StatusCode::kDataLoss);
  // A shape whose byte count overflows.
  v1::JobCheckpoint huge = Header();
  huge.mutable_persistent(0)->set_shape(0, int64_t{1} << 62);
  ASSERT_TRUE(WriteCheckpoint(path, huge, Data()).ok());
  EXPECT_EQ(ReadCheckpoint(path, 1 << 20).status().code(), absl::StatusCode::kDataLoss);
  // Over the size allowed; missing.
  rewrite(whole);
  EXPECT_EQ(ReadCheckpoint(path, 16).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadCheckpoint(path + "-missing", 1 << 20).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointFileTest, MatchesOnlyTheSamePersistentTensors) {
  const v1::JobCheckpoint header = Header();
  google::protobuf::RepeatedPtrField<v1::Tensor> persistent;
  for (const v1::TensorSpec& spec : header.persistent()) *persistent.Add()->mutable_spec() = spec;
  EXPECT_TRUE(CheckCheckpointMatches(Header(), persistent).ok());
  persistent[1].mutable_spec()->set_shape(0, 3);
  absl::Status s = CheckCheckpointMatches(Header(), persistent);
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  persistent.RemoveLast();
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckCheckpointMatches(Header(), persistent)));
}

TEST_F(CheckpointFileTest, OnlyCheckpointsOlderThanTheTtlAndNotKeptAreRemoved) {
  const auto now = std::chrono::system_clock::now();
  // (path under dir_, age in seconds, expected to be removed)
  const std::vector<std::tuple<std::string, int, bool>> files = {
      {"uid-1000/old.ckpt", 100, true},         {"uid-1000/young.ckpt", 10, false},
      {"uid-1000/crashed.ckpt.tmp", 100, true}, {"uid-1000/running.ckpt", 100, false},
      {"uid-1000/notes.txt", 100, false},       {"kernels/tandem_pw_1.cubin", 100, false},
      {"curve-61/old.ckpt", 100, true}};
  for (const auto& [name, age, removed] : files) {
    const std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "x";
    const auto when = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count() - age;
    const struct timespec times[2] = {{when, 0}, {when, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  }
  std::filesystem::create_directories(dir_ + "/uid-1000/old-folder.ckpt");  // a folder is never removed
  const std::vector<std::string> removed = RemoveExpiredCheckpoints(dir_, 50, now, {dir_ + "/uid-1000/running.ckpt"});
  for (const auto& [name, age, expected] : files) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(!std::filesystem::exists(path), expected) << name;
    EXPECT_EQ(std::count(removed.begin(), removed.end(), path), expected ? 1 : 0) << name;
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/uid-1000/old-folder.ckpt"));
  EXPECT_TRUE(RemoveExpiredCheckpoints(dir_ + "/missing", 50, now, {}).empty());
}

TEST(CheckpointOwnerTest, OnlyPrincipalsOwnCheckpoints) {
  PeerIdentity local;
  local.kind = PeerIdentity::Kind::kLocal;
  local.uid = 1000;
  EXPECT_EQ(CheckpointOwner(local), "uid-1000");
  PeerIdentity curve;
  curve.kind = PeerIdentity::Kind::kNetwork;
  curve.user = "al/../ice";
  EXPECT_EQ(CheckpointOwner(curve), "curve-616c2f2e2e2f696365");
  curve.user.clear();
  EXPECT_EQ(CheckpointOwner(curve), "");
  EXPECT_EQ(CheckpointOwner(PeerIdentity{}), "");
  EXPECT_NE(NewResumeToken(), NewResumeToken());
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "ab"));
}

// A job whose tensors came through shared memory may be far larger than
// the largest message: the read limit follows what the registration
// declares (a regression: a 1 GiB checkpoint was refused on resume).
TEST_F(CheckpointFileTest, TheReadLimitFollowsTheDeclaredTensors) {
  const v1::JobCheckpoint header = Header();
  google::protobuf::RepeatedPtrField<v1::Tensor> persistent;
  for (const v1::TensorSpec& spec : header.persistent()) *persistent.Add()->mutable_spec() = spec;
  EXPECT_EQ(CheckpointReadLimit(persistent, /*floor=*/0, /*slack=*/100), 100u + 24 + 16);
  EXPECT_EQ(CheckpointReadLimit(persistent, /*floor=*/1000, /*slack=*/100), 1000u);
  v1::TensorSpec* big = persistent.Add()->mutable_spec();
  big->set_dtype(v1::FLOAT32);
  big->add_shape(8192);
  big->add_shape(8192);
  big->add_shape(4);
  EXPECT_EQ(CheckpointReadLimit(persistent, 1000, 100), 100u + 24 + 16 + (uint64_t{1} << 30));
  // Dims whose product overflows are no tensor: they add nothing.
  v1::TensorSpec* bad = persistent.Add()->mutable_spec();
  bad->set_dtype(v1::FLOAT32);
  bad->add_shape(int64_t{1} << 40);
  bad->add_shape(int64_t{1} << 40);
  EXPECT_EQ(CheckpointReadLimit(persistent, 1000, 100), 100u + 24 + 16 + (uint64_t{1} << 30));
  // A checkpoint read with the limit of its own declared tensors.
  const std::string path = Write();
  google::protobuf::RepeatedPtrField<v1::Tensor> own;
  for (const v1::TensorSpec& spec : header.persistent()) *own.Add()->mutable_spec() = spec;
  EXPECT_TRUE(ReadCheckpoint(path, CheckpointReadLimit(own, 0, 4096)).ok());
  EXPECT_EQ(ReadCheckpoint(path, 16).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem::server
