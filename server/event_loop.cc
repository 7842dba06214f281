#include "server/event_loop.h"

#include <algorithm>
#include <chrono>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace tandem::server {

EventLoop::EventLoop() : context_(1) {}

void EventLoop::Post(const char* name, std::function<void()> fn) {
  const auto posted = std::chrono::steady_clock::now();
  boost::asio::post(context_, [this, name, posted, fn = std::move(fn)]() {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto end = std::chrono::steady_clock::now();
    stats_[name].Add(std::chrono::duration<double>(end - start).count(),
                     std::chrono::duration<double>(start - posted).count());
  });
}

void EventLoop::AddSection(const char* name, double seconds) { stats_[name].Add(seconds, 0); }

void EventLoop::Run() {
  auto guard = boost::asio::make_work_guard(context_);
  context_.run();
}

void EventLoop::Stop() { context_.stop(); }

std::map<std::string, HandlerStats> EventLoop::Stats() const {
  std::map<std::string, HandlerStats> merged;
  for (const auto& [name, s] : stats_) {
    HandlerStats& m = merged[name];
    m.count += s.count;
    m.total_seconds += s.total_seconds;
    m.max_seconds = std::max(m.max_seconds, s.max_seconds);
    m.wait_seconds += s.wait_seconds;
    m.max_wait_seconds = std::max(m.max_wait_seconds, s.max_wait_seconds);
  }
  return merged;
}

}  // namespace tandem::server
