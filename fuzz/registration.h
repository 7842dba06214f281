// What a registration does with a job, without a daemon: the wire graph's
// passes (transposes folded, elementwise chains fused), the graph built
// and validated, its memory planned and its program created for the CPU
// device, and, for a graph small enough, one iteration run on the CPU
// kernels over fresh inputs. Every value gets an allocation of its own, so
// that a kernel reading or writing past a tensor is caught by
// AddressSanitizer in a sanitizer build. Errors are the expected outcome of
// most fuzzed inputs and are ignored; crashes and sanitizer reports are the
// findings.
#ifndef TANDEM_FUZZ_REGISTRATION_H_
#define TANDEM_FUZZ_REGISTRATION_H_

#include <cstdint>

#include "tandem.pb.h"

namespace tandem::fuzz {

// The bound on one fuzzed iteration's values, summed (64 MiB): larger
// graphs are validated and planned but not run.
inline constexpr uint64_t kMaxRunBytes = uint64_t{64} << 20;

// Whether the registration was accepted (built and planned).
bool ExerciseRegistration(const v1::RegisterJobRequest& registration, uint64_t seed);

}  // namespace tandem::fuzz

#endif  // TANDEM_FUZZ_REGISTRATION_H_
