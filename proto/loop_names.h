// The naming rule of the stats reply's loop_handlers (LoopHandlerStats.name,
// proto/tandem.proto): a handler is named "Component.Handler"; a part of one
// (a section, whose time lies inside its handler's) "Handler/part". The
// daemon keeps the sections apart in its metrics, tandemctl in its table.
#ifndef TANDEM_PROTO_LOOP_NAMES_H_
#define TANDEM_PROTO_LOOP_NAMES_H_

#include <string_view>

namespace tandem {

// True for a section's name ("Handler/part"), false for a handler's.
inline bool IsLoopSection(std::string_view name) { return name.find('/') != std::string_view::npos; }

}  // namespace tandem

#endif  // TANDEM_PROTO_LOOP_NAMES_H_
