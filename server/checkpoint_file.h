// Jobs' checkpoints on disk (state_dir): what survives a restart of tandemd.
//
// A file per job and owner, <state_dir>/<owner>/<hex of the job's name>.ckpt,
// mode 0600 in folders of mode 0700:
//   "TANDEMCK" (8 bytes), the header's length (8 bytes, little endian), a
//   v1::JobCheckpoint (name, owner, resume token, iterations, the persistent
//   tensors' specs), then those tensors' bytes, in order, back to back.
// Written to a temporary file that is synced and renamed over the old one,
// so a crash (or kill -9) mid-write leaves the previous checkpoint whole.
// Read back with every size checked against the file's: a truncated or
// forged file is an error, never a read out of bounds.
#ifndef TANDEM_SERVER_CHECKPOINT_FILE_H_
#define TANDEM_SERVER_CHECKPOINT_FILE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/peer_identity.h"
#include "server/request_frames.h"
#include "tandem.pb.h"

namespace tandem::server {

// The owner folder's name for a principal: "uid-1000" on ipc, "curve-<hex>"
// for a CURVE user on tcp; "" for a peer that owns nothing beyond its
// session (anonymous tcp, unknown), whose jobs are not checkpointed.
std::string CheckpointOwner(const PeerIdentity& identity);
// <state_dir>/<owner>/<hex(name)>.ckpt
std::string CheckpointPath(const std::string& state_dir, const std::string& owner, const std::string& name);
// 16 random bytes from the kernel.
std::string NewResumeToken();

// Writes `header` (its data_bytes set here) and `data` atomically to `path`,
// creating its folders (0700) as needed.
absl::Status WriteCheckpoint(const std::string& path, v1::JobCheckpoint header, absl::string_view data);

// A checkpoint read back: its header, and its tensors' bytes as frames
// (frame i: persistent tensor i), which a registration uploads from.
struct LoadedCheckpoint {
  v1::JobCheckpoint header;
  std::shared_ptr<const RequestFrames> frames;
};
// NOT_FOUND when there is no file; DATA_LOSS when it is not a whole,
// consistent checkpoint; larger than `max_bytes`: RESOURCE_EXHAUSTED.
absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const std::string& path, uint64_t max_bytes);

// The largest checkpoint file a registration declaring `persistent` may
// resume from: its persistent tensors' bytes (which the checkpoint must
// hold, CheckCheckpointMatches) plus `slack` for the header, and at least
// `floor`. Its tensors may have come through shared memory, far beyond the
// largest message. A spec that is no valid tensor type counts as nothing
// (the match check refuses it).
uint64_t CheckpointReadLimit(const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent, uint64_t floor,
                             uint64_t slack);

// OK when the checkpoint's tensors are, in order, the registration's
// persistent tensors (names, dtypes, shapes); FAILED_PRECONDITION naming the
// first difference otherwise.
absl::Status CheckCheckpointMatches(const v1::JobCheckpoint& header,
                                    const google::protobuf::RepeatedPtrField<v1::Tensor>& persistent);

// Deletes the checkpoints under `state_dir` (<owner>/*.ckpt, and the
// *.ckpt.tmp a crash mid-write left) last written more than `ttl_seconds`
// before `now`, except the paths in `keep` (running jobs'). Other files and
// folders (the kernel cache) are left alone. Returns the paths deleted.
std::vector<std::string> RemoveExpiredCheckpoints(const std::string& state_dir, double ttl_seconds,
                                                  std::chrono::system_clock::time_point now,
                                                  const absl::flat_hash_set<std::string>& keep);

// Whether two tokens are equal, in time that does not depend on where they
// differ.
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_CHECKPOINT_FILE_H_
