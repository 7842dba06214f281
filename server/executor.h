// An executor: one thread that runs posted work items in post order. The
// daemon gives each lane of a device one (or shares a few among the lanes,
// --executor_threads) to enqueue its device work (copies, programs,
// completions), so that the control loop never blocks on kernel launches
// and one lane's launches (or a graph capture) do not wait behind
// another's. Items run in post order, which keeps each lane stream's order
// equal to the order the control loop decided.
//
// It counts its items, the time they ran and the time they waited behind
// earlier ones (Stats): an executor busy nearly all the time is where a
// lane's iterations queue before they reach the device.
//
// Thread-safety: Post() and Stats() from any thread.
#ifndef TANDEM_SERVER_EXECUTOR_H_
#define TANDEM_SERVER_EXECUTOR_H_

#include <pthread.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "absl/synchronization/mutex.h"
#include "server/event_loop.h"

namespace tandem::server {

class Executor {
 public:
  // `name` names the thread ("exec <name>" in top -H, at most 15 characters).
  explicit Executor(std::string name)
      : name_(std::move(name)), guard_(boost::asio::make_work_guard(context_)), thread_([this] {
          pthread_setname_np(pthread_self(), ("exec " + name_).substr(0, 15).c_str());
          context_.run();
        }) {}
  ~Executor() {
    guard_.reset();  // lets run() return once the queue is drained
    thread_.join();
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const std::string& name() const { return name_; }

  void Post(std::function<void()> work) {
    boost::asio::post(context_, [this, posted = Clock::now(), work = std::move(work)]() {
      const Clock::time_point start = Clock::now();
      work();
      const Clock::time_point end = Clock::now();
      absl::MutexLock lock(&mu_);
      stats_.Add(std::chrono::duration<double>(end - start).count(),
                 std::chrono::duration<double>(start - posted).count());
    });
  }

  // The items run to their end: count, time running, wait before starting
  // (as the control loop counts its own, server/event_loop.h).
  HandlerStats Stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  const std::string name_;
  mutable absl::Mutex mu_;
  HandlerStats stats_;  // guarded by mu_
  boost::asio::io_context context_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_EXECUTOR_H_
