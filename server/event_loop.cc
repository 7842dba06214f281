#include "server/event_loop.h"

#include <algorithm>
#include <chrono>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace tandem::server {

EventLoop::EventLoop() : context_(1) {}

void EventLoop::Post(const char* name, std::function<void()> fn) {
  boost::asio::post(context_, [this, name, fn = std::move(fn)]() {
    auto start = std::chrono::steady_clock::now();
    fn();
    AddSection(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
}

void EventLoop::AddSection(const char* name, double seconds) {
  HandlerStats& s = stats_[name];
  s.count++;
  s.total_seconds += seconds;
  if (seconds > s.max_seconds) s.max_seconds = seconds;
}

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
  }
  return merged;
}

}  // namespace tandem::server
