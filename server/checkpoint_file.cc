#include "server/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"
#include "base/random_token.h"
#include "base/unique_fd.h"
#include "ir/graph_builder.h"

namespace tandem::server {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'C', 'K'};
constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// mkdir -p with mode 0700 for the folders it makes.
absl::Status MakeFolders(const std::string& folder) {
  for (size_t i = 1; i <= folder.size(); ++i) {
    if (i != folder.size() && folder[i] != '/') continue;
    const std::string prefix = folder.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot create", prefix);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot write", path);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// The tensors' bytes of a checkpoint, in one buffer.
class CheckpointFrames : public RequestFrames {
 public:
  CheckpointFrames(std::string data, std::vector<std::pair<uint64_t, uint64_t>> ranges)
      : data_(std::move(data)), ranges_(std::move(ranges)) {}
  size_t size() const override { return ranges_.size(); }
  absl::string_view frame(size_t i) const override {
    return absl::string_view(data_).substr(ranges_[i].first, ranges_[i].second);
  }

 private:
  std::string data_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // (offset, bytes)
};

// Each spec's byte count, checked; their sum in *total.
absl::StatusOr<std::vector<uint64_t>> SpecBytes(const v1::JobCheckpoint& header, uint64_t* total) {
  std::vector<uint64_t> bytes;
  *total = 0;
  for (const v1::TensorSpec& spec : header.persistent()) {
    absl::StatusOr<TensorType> type = TensorTypeFromProto(spec, GraphLimits{});
    if (!type.ok())
      return absl::DataLossError(absl::StrCat("bad tensor '", spec.name(), "': ", type.status().message()));
    const std::optional<uint64_t> sum = CheckedAddU(*total, static_cast<uint64_t>(type->bytes()));
    if (!sum) return absl::DataLossError("tensor sizes overflow");
    *total = *sum;
    bytes.push_back(static_cast<uint64_t>(type->bytes()));
  }
  return bytes;
}

}  // namespace

std::string CheckpointOwner(const PeerIdentity& identity) {
  if (identity.kind == PeerIdentity::Kind::kLocal) return absl::StrCat("uid-", identity.uid);
  if (identity.kind == PeerIdentity::Kind::kNetwork && !identity.user.empty()) {
    return absl::StrCat("curve-", absl::BytesToHexString(identity.user));
  }
  return "";
}

std::string CheckpointPath(const std::string& state_dir, const std::string& owner, const std::string& name) {
  return absl::StrCat(state_dir, "/", owner, "/", absl::BytesToHexString(name), ".ckpt");
}

std::string NewResumeToken() { return RandomToken(16); }

absl::Status WriteCheckpoint(const std::string& path, v1::JobCheckpoint header, absl::string_view data) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("not a path: ", path));
  if (absl::Status s = MakeFolders(path.substr(0, slash)); !s.ok()) return s;
  header.set_data_bytes(data.size());
  const std::string head = header.SerializeAsString();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((uint64_t{head.size()} >> (8 * i)) & 0xff);

  const std::string temporary = absl::StrCat(path, ".tmp");
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Errno("cannot create", temporary);
  absl::Status s = WriteAll(fd.get(), absl::string_view(kMagic, sizeof(kMagic)), temporary);
  if (s.ok()) s = WriteAll(fd.get(), absl::string_view(length, sizeof(length)), temporary);
  if (s.ok()) s = WriteAll(fd.get(), head, temporary);
  if (s.ok()) s = WriteAll(fd.get(), data, temporary);
  if (s.ok() && ::fsync(fd.get()) != 0) s = Errno("cannot sync", temporary);
  fd.Reset();
  if (s.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) s = Errno("cannot rename to", path);
  if (!s.ok()) ::unlink(temporary.c_str());
  return s;
}

absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no checkpoint ", path));
    return Errno("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", path);
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint ", path, " has ", file_bytes, " bytes, over the ", max_bytes, " allowed"));
  }
  std::string all(file_bytes, '\0');
  size_t got = 0;
  while (got < all.size()) {
    const ssize_t n = ::read(fd.get(), all.data() + got, all.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot read", path);
    got += static_cast<size_t>(n);
  }
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is damaged: ", why));
  };
  if (all.size() < 16 || std::memcmp(all.data(), kMagic, sizeof(kMagic)) != 0) return bad("not a checkpoint");
  uint64_t head_bytes = 0;
  for (int i = 0; i < 8; ++i) head_bytes |= uint64_t{static_cast<unsigned char>(all[8 + i])} << (8 * i);
  if (head_bytes > kMaxHeaderBytes || head_bytes > all.size() - 16) return bad("header length out of range");
  LoadedCheckpoint loaded;
  if (!loaded.header.ParseFromArray(all.data() + 16, static_cast<int>(head_bytes))) return bad("unreadable header");
  uint64_t total = 0;
  absl::StatusOr<std::vector<uint64_t>> sizes = SpecBytes(loaded.header, &total);
  if (!sizes.ok()) return bad(sizes.status().message());
  const uint64_t data_start = 16 + head_bytes;
  if (total != loaded.header.data_bytes() || all.size() - data_start != total) {
    return bad(absl::StrCat("holds ", all.size() - data_start, " data bytes; its tensors need ", total));
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t offset = 0;
  for (uint64_t n : *sizes) {
    ranges.emplace_back(offset, n);
    offset += n;
  }
  all.erase(0, data_start);
  loaded.frames = std::make_shared<CheckpointFrames>(std::move(all), std::move(ranges));
  return loaded;
}

uint64_t CheckpointReadLimit(const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent, uint64_t floor,
                             uint64_t slack) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() / 2;
  uint64_t bytes = slack;
  for (const v1::Tensor& t : persistent) {
    absl::StatusOr<TensorType> type = TensorTypeFromProto(t.spec(), GraphLimits{});
    if (!type.ok()) continue;
    bytes = std::min(kMax, bytes + std::min<uint64_t>(kMax, type->bytes()));
  }
  return std::max(floor, bytes);
}

absl::Status CheckCheckpointMatches(const v1::JobCheckpoint& header,
                                    const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent) {
  if (header.persistent_size() != persistent.size()) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint of job '", header.name(), "' holds ",
                                                      header.persistent_size(), " persistent tensors; the job has ",
                                                      persistent.size()));
  }
  for (int i = 0; i < persistent.size(); ++i) {
    const v1::TensorSpec& a = header.persistent(i);
    const v1::TensorSpec& b = persistent[i].spec();
    if (a.name() != b.name() || a.dtype() != b.dtype() ||
        !std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint of job '", header.name(), "' does not match the job: its persistent tensor ", i, " is '",
          a.name(), "' ", v1::DType_Name(a.dtype()), "[", absl::StrJoin(a.shape(), ","), "], the job's '", b.name(),
          "' ", v1::DType_Name(b.dtype()), "[", absl::StrJoin(b.shape(), ","), "]"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> RemoveExpiredCheckpoints(const std::string& state_dir, double ttl_seconds,
                                                  std::chrono::system_clock::time_point now,
                                                  const absl::flat_hash_set<std::string>& keep) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  const double now_seconds = std::chrono::duration<double>(now.time_since_epoch()).count();
  std::error_code error;
  for (const fs::directory_entry& owner : fs::directory_iterator(state_dir, error)) {
    if (!owner.is_directory(error)) continue;
    for (const fs::directory_entry& file : fs::directory_iterator(owner.path(), error)) {
      const std::string path = file.path().string();
      if (!absl::EndsWith(path, ".ckpt") && !absl::EndsWith(path, ".ckpt.tmp")) continue;
      if (keep.contains(path)) continue;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const double written = static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
      if (now_seconds - written <= ttl_seconds) continue;
      if (::unlink(path.c_str()) == 0) removed.push_back(path);
    }
  }
  return removed;
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace tandem::server
