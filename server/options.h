// tandemd's settings: every flag and config-file key of the daemon, in one
// struct. server/config.h names each field's key, parses and validates it,
// and says which can change while the daemon runs (on SIGHUP).
#ifndef TANDEM_SERVER_OPTIONS_H_
#define TANDEM_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::server {

struct DaemonOptions {
  std::string endpoint;            // empty: DaemonDefaultEndpoint()
  std::string device = "auto";     // auto | cpu | cuda
  std::vector<int> gpus;           // CUDA ordinals to use; empty: all
  std::string policy = "pack";     // fifo | pack | fair | srtf | priority | srtf_pack
  std::string log_level = "info";  // debug | info | warning | error
  uint64_t max_message_bytes = uint64_t{256} << 20;
  double session_timeout_seconds = 30;
  uint64_t cpu_memory_bytes = uint64_t{8} << 30;  // capacity of the CPU device
  uint64_t reserve_bytes = 0;                     // 0: measured/estimated per device at start
  int max_lanes = 4;
  // Lane arenas' slack per device (memory::DeviceMemoryOptions::lane_slack_bytes).
  uint64_t lane_slack_bytes = uint64_t{512} << 20;
  uint64_t max_job_bytes = 0;     // per-job quota; 0: none
  int max_inflight_per_lane = 2;  // iterations enqueued ahead on a lane
  int max_queued_per_job = 64;    // iterations a job may have waiting
  int max_jobs_per_session = 64;  // jobs one session may hold (running, waiting or registering)
  // Reply bytes the daemon holds for one session that its client has not
  // read yet; past it, the session's requests are refused until it reads.
  uint64_t max_unread_reply_bytes = uint64_t{1} << 30;
  // Threads per device that enqueue the lanes' work (copies, graph launches,
  // captures); lane k uses thread k mod N. 0: one per lane.
  int executor_threads = 0;
  std::string socket_group;  // group owning an ipc socket; empty: the daemon's
  // Access control (server/access_control.h): the group whose members
  // administer the daemon (besides root and the daemon's own user), and the
  // ceilings of what a non-administrator's job may ask for.
  std::string admin_group;
  int max_user_priority = 0;
  double max_user_weight = 1.0;
  int metrics_port = 0;  // Prometheus endpoint; 0: off
  std::string metrics_address = "127.0.0.1";
  bool fuse_elementwise = true;        // fuse chains of elementwise nodes at registration
  std::string channels_last = "auto";  // convolution networks' activations NHWC: auto (GPUs), true, false
  // How PRIORITY preempts a lower-priority iteration: "iteration" (never
  // mid-iteration) or "op" (it runs in segments and pauses between two while
  // a higher-priority iteration runs; docs/scheduling.md). The defaults are
  // those that kept a high-priority job within 5% of its solo time on the
  // H200 (segments replay graphs of their own).
  std::string preemption = "op";
  int preemption_segment_nodes = 16;      // op preemption: nodes per segment
  int preemption_segments_in_flight = 1;  // op preemption: segments enqueued at once
  // Under PRIORITY, lanes of higher-priority jobs get higher device stream
  // priorities where the device has them (CUDA).
  bool stream_priorities = true;
  // Ready every lane's stream for each job after its first iteration, so
  // that a move to another lane does not set up per-stream state (cuDNN
  // plans) on that lane's thread in the middle of serving.
  bool warm_lanes = true;
  // Persistence (server/checkpoint_file.h, docs/deploy.md): where jobs that
  // update their persistent tensors are checkpointed (empty: nowhere), and
  // how often, at most (also on SIGTERM and when their client goes away).
  std::string state_dir;
  double checkpoint_interval_seconds = 60;
  // A checkpoint nobody resumed within this long of its last write is
  // deleted (swept at start and then every ttl/4, at most hourly); 0: kept
  // until resumed and closed.
  double checkpoint_ttl_seconds = 7 * 86400;
  // Generated kernels (codegen/): on, and where compiled ones persist
  // ("auto": <state_dir>/kernels, else $XDG_CACHE_HOME or ~/.cache
  // /tandem/kernels; "none": memory only).
  bool codegen = true;
  std::string kernel_cache_dir = "auto";
  // Faults (docs/deploy.md): after a fault that leaves a device unusable,
  // tandemd answers every request and starts itself again (exec), so that
  // its clients re-attach their jobs from their checkpoints; false: it
  // exits (status 75) and leaves the restart to its service manager.
  bool restart_on_fault = true;
  // With restart_on_fault: a keeper process that forks the daemon and a
  // standby fork ready to take over after a device fault (server/standby.h).
  bool standby = true;
  // Accept graphs that use the op test_fault (ir/ops/test_ops.cc), which
  // faults its device on demand: for the recovery tests only.
  bool test_faults = false;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_OPTIONS_H_
