#include "proto/status_convert.h"

namespace tandem {

void StatusToProto(const absl::Status& status, v1::Status* out) {
  out->set_code(static_cast<int>(status.code()));
  out->set_message(std::string(status.message()));
}

absl::Status StatusFromProto(const v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  int code = status.code();
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<int>(absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.message());
}

}  // namespace tandem
