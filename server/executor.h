// A per-device executor: one thread that enqueues device work (copies,
// programs, completions) so that the control loop never blocks on kernel
// launches. Work items run in post order, which keeps each lane stream's
// order equal to the order the control loop decided.
//
// Thread-safety: Post() from any thread.
#ifndef TANDEM_SERVER_EXECUTOR_H_
#define TANDEM_SERVER_EXECUTOR_H_

#include <pthread.h>

#include <functional>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace tandem::server {

class Executor {
 public:
  explicit Executor(std::string name)
      : name_(std::move(name)), guard_(boost::asio::make_work_guard(context_)),
        thread_([this] {
          // "exec cuda:0" in top -H and /proc/<pid>/task (at most 15 characters).
          pthread_setname_np(pthread_self(), ("exec " + name_).substr(0, 15).c_str());
          context_.run();
        }) {}
  ~Executor() {
    guard_.reset();  // lets run() return once the queue is drained
    thread_.join();
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> work) { boost::asio::post(context_, std::move(work)); }

 private:
  const std::string name_;
  boost::asio::io_context context_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_EXECUTOR_H_
