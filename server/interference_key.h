// The interference key of a registered job: jobs with the same graph (ops,
// shapes, attributes; not weights) behave alike on the device, so they share
// the scheduler's solo-time and pair measurements under one key.
#ifndef TANDEM_SERVER_INTERFERENCE_KEY_H_
#define TANDEM_SERVER_INTERFERENCE_KEY_H_

#include <string>

#include "tandem.pb.h"

namespace tandem::server {

// A digest of the graph's deterministic serialization (map fields such as a
// node's attributes in key order), so equal graphs give equal keys however
// their messages were built or parsed. Stable within one daemon process.
std::string InterferenceKey(const v1::Graph& graph);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_INTERFERENCE_KEY_H_
