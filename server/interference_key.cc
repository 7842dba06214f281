#include "server/interference_key.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace tandem::server {

std::string InterferenceKey(const v1::Graph& graph) {
  // SerializeAsString writes a map's entries in the order of its hash
  // table, which differs between two messages holding the same entries: two
  // registrations of one graph then had different keys, and a crowd of alike
  // inference models got one key each (each probed alone, every pair
  // measured apart, PACK's Rebalance quadratic in their number).
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    graph.SerializeToCodedStream(&out);
  }
  return absl::StrCat(absl::Hash<std::string>()(bytes));
}

}  // namespace tandem::server
