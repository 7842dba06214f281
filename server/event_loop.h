// The daemon's control loop: one thread running an Asio io_context that owns
// all session, job and scheduling state.
//
// Other threads (the ZeroMQ socket thread, the per-device executors, device
// completion callbacks) never touch loop state; they Post() named work items
// and the loop keeps per-name counts and timings, so the stats reply can show
// where the loop spends its time ("Transport.OnMessage", "Executor.OnDone"),
// and how long each item waited in the queue behind others before it ran:
// the delay the one thread adds to whatever the item does (a reply, the next
// iteration's dispatch).
//
// A work item may also time parts of itself (LoopSection): those are kept
// beside the handlers under the name "Handler/part" (proto/loop_names.h),
// their time inside their handler's, so a handler's total can be taken apart
// without a profiler.
//
// Thread-safety: Post() from any thread; everything else (Stats() included)
// on the loop thread.
#ifndef TANDEM_SERVER_EVENT_LOOP_H_
#define TANDEM_SERVER_EVENT_LOOP_H_

#include <chrono>
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
  // From Post() to the start of the item (work items only; 0 for sections).
  double wait_seconds = 0;
  double max_wait_seconds = 0;

  // Counts one item that ran `seconds` after waiting `wait` (0: a section).
  void Add(double seconds, double wait) {
    count++;
    total_seconds += seconds;
    if (seconds > max_seconds) max_seconds = seconds;
    wait_seconds += wait;
    if (wait > max_wait_seconds) max_wait_seconds = wait;
  }
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

  // Adds `seconds` to a section of the running work item. `name` must be a
  // string literal of the form "Handler/part".
  void AddSection(const char* name, double seconds);

  // Per work-item name, what the loop spent on it and how long its items
  // waited; sections (names with a '/') too.
  std::map<std::string, HandlerStats> Stats() const;

 private:
  boost::asio::io_context context_;
  // Keyed by the literal's address (a name used in two files may have two
  // entries; Stats() merges them): no string is built per work item.
  absl::flat_hash_map<const char*, HandlerStats> stats_;
};

// Times the scope it lives in as a section of the running work item.
class LoopSection {
 public:
  LoopSection(EventLoop& loop, const char* name) : loop_(loop), name_(name), start_(std::chrono::steady_clock::now()) {}
  ~LoopSection() {
    loop_.AddSection(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  LoopSection(const LoopSection&) = delete;
  LoopSection& operator=(const LoopSection&) = delete;

 private:
  EventLoop& loop_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_EVENT_LOOP_H_
