// Attrs from (name, value) pairs, as tests and hand-built graphs write them:
//   MakeAttrs({{"dim", int64_t{1}}, {"keepdim", true}})
#ifndef TANDEM_IR_MAKE_ATTRS_H_
#define TANDEM_IR_MAKE_ATTRS_H_

#include <string>
#include <utility>
#include <vector>

#include "ir/attrs.h"

namespace tandem {

inline Attrs MakeAttrs(std::vector<std::pair<std::string, AttrValue>> values) {
  Attrs attrs;
  for (auto& [name, value] : values) attrs.Set(std::move(name), std::move(value));
  return attrs;
}

}  // namespace tandem

#endif  // TANDEM_IR_MAKE_ATTRS_H_
