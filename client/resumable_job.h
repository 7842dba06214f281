// A job that re-attaches by itself when tandemd goes away and comes back: a
// restart after a device fault (docs/deploy.md, Device faults), a crash, an
// upgrade. The C++ side of what the PyTorch adaptor's TrainingJob does.
//
// It keeps its registration request (the graph and the persistent tensors'
// initial values, copied once: the model's size in host memory). When an
// iteration comes back UNAVAILABLE (tandemd stopping, restarting, or gone),
// it connects again within the re-attach timeout and registers the request
// with the job's resume token: the daemon continues the job from its last
// checkpoint (its state_dir must be set, and the job named). The iterations
// applied after that checkpoint are lost; the one that failed is sent
// again. Each re-attach is recorded (recoveries()). Without a resume token
// (no state_dir, an unnamed job, a job that updates nothing), or with a
// timeout of 0, the UNAVAILABLE error is returned as it came.
//
// Synchronous (Run) or pipelined (Submit, then Wait for each, oldest
// first): after a re-attach every iteration still in flight is sent again,
// in order. Not thread-safe.
#ifndef TANDEM_CLIENT_RESUMABLE_JOB_H_
#define TANDEM_CLIENT_RESUMABLE_JOB_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "tandem.pb.h"

namespace tandem::client {

// One re-attach.
struct Recovery {
  uint64_t resumed_iterations = 0;  // the checkpoint's: the job continues from there
  uint64_t lost = 0;                // iterations applied after it, gone with the daemon
  double pause_seconds = 0;         // from the failed iteration to registered again
};

class ResumableJob {
 public:
  // Connects with `options` and registers `request` (named: a checkpoint is
  // found by its owner and name).
  static absl::StatusOr<std::unique_ptr<ResumableJob>> Register(const ClientOptions& options,
                                                                v1::RegisterJobRequest request,
                                                                absl::Duration reattach_timeout = absl::Seconds(60));

  // Runs one iteration and returns its fetches; re-attaches first when
  // tandemd went away (then the iteration runs on the job as its
  // checkpoint left it). No iteration may be in flight (a Submit without
  // its Wait).
  absl::StatusOr<IterationResult> Run(const NamedTensors& feeds, const std::vector<std::string>& fetches);

  // Sends one iteration and returns at once; Wait collects it. The feeds are
  // kept until then, to be sent again after a re-attach. An iteration that
  // cannot be sent because tandemd went away is sent after the re-attach.
  absl::Status Submit(NamedTensors feeds, std::vector<std::string> fetches);
  // The result of the oldest submitted iteration, re-attaching first when
  // tandemd went away. Another error drops that iteration and is returned.
  absl::StatusOr<IterationResult> Wait();
  size_t in_flight() const { return pending_.size(); }

  // The iterations the job's weights hold: those done since registration,
  // from the checkpoint's count after a re-attach.
  uint64_t iterations() const { return iterations_; }
  const std::vector<Recovery>& recoveries() const { return recoveries_; }
  uint64_t job_id() const { return response_.job_id(); }
  const v1::RegisterJobResponse& registration() const { return response_; }
  Client& client() { return *client_; }

 private:
  ResumableJob(ClientOptions options, v1::RegisterJobRequest request, absl::Duration reattach_timeout)
      : options_(std::move(options)), request_(std::move(request)), reattach_timeout_(reattach_timeout) {}
  // Connects and registers (with the resume token once there is one),
  // retrying UNAVAILABLE until `deadline`.
  absl::Status Attach(absl::Time deadline);
  // Whether `s` is tandemd going away and this job can come back from it.
  bool Resumable(const absl::Status& s) const;
  // Re-attaches after `cause` and sends every pending iteration again;
  // `resend_failed` when the re-attach worked and a send did not.
  absl::Status Recover(const absl::Status& cause, bool* resend_failed);

  // An iteration in flight: its request, and its ticket once sent.
  struct Pending {
    NamedTensors feeds;
    std::vector<std::string> fetches;
    uint64_t ticket = 0;
    bool sent = false;
  };

  ClientOptions options_;
  v1::RegisterJobRequest request_;  // as registered first, without a token
  absl::Duration reattach_timeout_;
  std::unique_ptr<Client> client_;
  v1::RegisterJobResponse response_;
  uint64_t iterations_ = 0;
  std::vector<Recovery> recoveries_;
  std::deque<Pending> pending_;  // oldest first
};

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_RESUMABLE_JOB_H_
