// Fuzzing of the wire: any bytes as a tandem.v1.Request, as the daemon
// parses them; a registration among them goes through everything a
// registration does (fuzz/registration.h). The seed corpus holds real
// requests (make_corpus.cc), so mutations start from well-formed jobs.
#include <cstdint>

#include "fuzz/registration.h"
#include "tandem.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::v1::Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (request.has_register_job()) tandem::fuzz::ExerciseRegistration(request.register_job(), size);
  return 0;
}
