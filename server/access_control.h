// Who may do what to whom: the daemon's authorization rules, as plain
// functions over identities (server/peer_identity.h), so that they are
// tested without a daemon.
//
// - A job belongs to the principal whose session registered it: a uid on
//   ipc, a CURVE user on tcp (an anonymous tcp session owns only its own
//   jobs). Reads, iterations and closes act on the session's own jobs only.
// - Administrators (root, the daemon's own user, members of the configured
//   admin group, CURVE users listed as admins) may act on every job, and
//   alone may change the policy or drain the daemon.
// - A job's owner may kill it or change its priority, within the ceilings.
// - Priority, weight and memory quota above the configured ceilings
//   (max_user_priority, max_user_weight, max_job_memory_mib) need an
//   administrator, at registration and in set-priority.
// Thread-compatible (no state).
#ifndef TANDEM_SERVER_ACCESS_CONTROL_H_
#define TANDEM_SERVER_ACCESS_CONTROL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/peer_identity.h"
#include "tandem.pb.h"

namespace tandem::server {

struct AccessOptions {
  uid_t daemon_uid = 0;                      // the daemon's effective uid
  gid_t admin_gid = static_cast<gid_t>(-1);  // -1: no admin group
  int max_user_priority = 0;
  double max_user_weight = 1.0;
  uint64_t max_job_bytes = 0;  // 0: no ceiling
};

// Whether `who` administers the daemon. `curve_admin`: tcp's key file
// lists this CURVE user as an admin. Looks up the uid's groups (NSS).
bool IsAdministrator(const PeerIdentity& who, const AccessOptions& options, bool curve_admin = false);

// Whether the principal `who` (admin or not, as `admin` says) may kill or
// reprioritize a job registered by `owner` in session `owner_session`;
// `who_session` is the requester's session.
bool MayManageJob(const PeerIdentity& who, bool admin, uint64_t who_session, const PeerIdentity& owner,
                  uint64_t owner_session);

// PERMISSION_DENIED, naming the ceiling, when a non-admin's hints exceed one.
absl::Status CheckHintCeilings(const v1::JobHints& hints, bool admin, const AccessOptions& options);
// The same for a priority set later.
absl::Status CheckPriorityCeiling(int32_t priority, bool admin, const AccessOptions& options);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_ACCESS_CONTROL_H_
