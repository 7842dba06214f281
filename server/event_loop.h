// The daemon's control loop: one thread running an Asio io_context that owns
// all session, job and scheduling state.
//
// Other threads (the ZeroMQ socket thread, the per-device executors, device
// completion callbacks) never touch loop state; they Post() named work items
// and the loop keeps per-name counts and timings, so the stats reply can show
// where the loop spends its time ("Transport.OnMessage", "Executor.OnDone").
//
// Thread-safety: Post() from any thread; everything else (Stats() included)
// on the loop thread.
#ifndef TANDEM_SERVER_EVENT_LOOP_H_
#define TANDEM_SERVER_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <boost/asio/io_context.hpp>

#include "absl/container/flat_hash_map.h"

namespace tandem::server {

struct HandlerStats {
  uint64_t count = 0;
  double total_seconds = 0;
  double max_seconds = 0;
};

class EventLoop {
 public:
  EventLoop();

  boost::asio::io_context& context() { return context_; }

  // Runs `fn` on the loop thread. `name` must be a string literal.
  void Post(const char* name, std::function<void()> fn);

  // Runs the loop on the calling thread until Stop().
  void Run();
  void Stop();

  // Per work-item name, what the loop spent on it.
  std::map<std::string, HandlerStats> Stats() const;

 private:
  boost::asio::io_context context_;
  // Keyed by the literal's address (a name used in two files may have two
  // entries; Stats() merges them): no string is built per work item.
  absl::flat_hash_map<const char*, HandlerStats> stats_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_EVENT_LOOP_H_
