#include "server/access_control.h"

#include <grp.h>
#include <pwd.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::server {
namespace {

// Whether `uid` (primary group `gid`) is a member of group `group`.
bool InGroup(uid_t uid, gid_t gid, gid_t group) {
  if (gid == group) return true;
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return false;
  int count = 64;
  std::vector<gid_t> groups(count);
  if (::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (groups[i] == group) return true;
  }
  return false;
}

absl::Status NeedsAdmin(const std::string& what) {
  return absl::PermissionDeniedError(absl::StrCat(what, " needs an administrator of tandemd"));
}

}  // namespace

bool IsAdministrator(const PeerIdentity& who, const AccessOptions& options, bool curve_admin) {
  switch (who.kind) {
    case PeerIdentity::Kind::kLocal:
      if (who.uid == 0 || who.uid == options.daemon_uid) return true;
      return options.admin_gid != static_cast<gid_t>(-1) && InGroup(who.uid, who.gid, options.admin_gid);
    case PeerIdentity::Kind::kNetwork:
      return !who.user.empty() && curve_admin;
    case PeerIdentity::Kind::kUnknown:
      return false;
  }
  return false;
}

bool MayManageJob(const PeerIdentity& who, bool admin, uint64_t who_session, const PeerIdentity& owner,
                  uint64_t owner_session) {
  if (admin) return true;
  if (who_session == owner_session) return true;
  return who.SamePrincipal(owner);
}

absl::Status CheckPriorityCeiling(int32_t priority, bool admin, const AccessOptions& options) {
  if (admin || priority <= options.max_user_priority) return absl::OkStatus();
  return NeedsAdmin(absl::StrCat("priority ", priority, " (above max_user_priority ", options.max_user_priority, ")"));
}

absl::Status CheckHintCeilings(const v1::JobHints& hints, bool admin, const AccessOptions& options) {
  if (admin) return absl::OkStatus();
  if (absl::Status s = CheckPriorityCeiling(hints.priority(), admin, options); !s.ok()) return s;
  if (hints.weight() > options.max_user_weight) {
    return NeedsAdmin(
        absl::StrCat("weight ", hints.weight(), " (above max_user_weight ", options.max_user_weight, ")"));
  }
  if (options.max_job_bytes != 0 && hints.memory_quota_bytes() > options.max_job_bytes) {
    return NeedsAdmin(absl::StrCat("a memory quota of ", hints.memory_quota_bytes(),
                                   " bytes (above max_job_memory_mib, ", options.max_job_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::server
