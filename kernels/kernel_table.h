// A backend's kernels, keyed by each op's canonical name: the name of its
// OpDef in the op registry (ir/op_registry.h). An op's aliases (view_copy,
// _unsafe_view, reshape, ... of view) resolve once, in the registry, so a
// backend lists each op once, under that name. Adding a kernel under an
// alias or under a name the registry does not know aborts when the table is
// built (at its backend's first lookup): a programming error that every
// test of the backend catches.
//
// Built once by its backend's Add*Kernels functions, then read-only and
// thread-safe.
#ifndef TANDEM_KERNELS_KERNEL_TABLE_H_
#define TANDEM_KERNELS_KERNEL_TABLE_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "ir/op_registry.h"

namespace tandem {

template <typename Fn>
class KernelTable {
 public:
  // The slot of op `op`, which must be the op's canonical name.
  Fn& operator[](absl::string_view op) {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (def == nullptr || def->name != op) {
      std::fprintf(stderr, "kernel table: '%s' is %s; register the kernel under %s\n", std::string(op).c_str(),
                   def == nullptr ? "no registered op" : "an alias",
                   def == nullptr ? "a registered op" : def->name.c_str());
      std::abort();
    }
    return kernels_[std::string(op)];
  }

  // The kernel of the op named `op` (any of its names); null when the
  // backend has none.
  Fn Find(absl::string_view op) const {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (def == nullptr) return nullptr;
    auto it = kernels_.find(def->name);
    return it == kernels_.end() ? nullptr : it->second;
  }

  size_t size() const { return kernels_.size(); }

 private:
  absl::flat_hash_map<std::string, Fn> kernels_;
};

}  // namespace tandem

#endif  // TANDEM_KERNELS_KERNEL_TABLE_H_
