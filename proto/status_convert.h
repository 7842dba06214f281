// Conversion between absl::Status and the wire's tandem.v1.Status.
#ifndef TANDEM_PROTO_STATUS_CONVERT_H_
#define TANDEM_PROTO_STATUS_CONVERT_H_

#include "absl/status/status.h"
#include "tandem.pb.h"

namespace tandem {

void StatusToProto(const absl::Status& status, v1::Status* out);
absl::Status StatusFromProto(const v1::Status& status);

}  // namespace tandem

#endif  // TANDEM_PROTO_STATUS_CONVERT_H_
