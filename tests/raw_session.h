// A raw ZeroMQ connection to tandemd that has said hello, for tests that
// need what the client library never sends: frames of their own choosing,
// or several requests in flight at once.
#ifndef TANDEM_TESTS_RAW_SESSION_H_
#define TANDEM_TESTS_RAW_SESSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "gtest/gtest.h"
#include "tandem.pb.h"

namespace tandem::testing {

class RawSession {
 public:
  // Connects (with ZeroMQ routing id `routing_id` when not empty) and,
  // with `say_hello`, opens a session. `receive_queue` > 0: ZeroMQ on this
  // side takes in at most that many replies ahead of Receive() (a client
  // that does not read leaves the rest with the daemon).
  explicit RawSession(const std::string& endpoint, const std::string& routing_id = "", bool say_hello = true,
                      int receive_queue = 0)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 5000);
    if (receive_queue > 0) {
      socket_.set(zmq::sockopt::rcvhwm, receive_queue);
      socket_.set(zmq::sockopt::rcvbuf, 4096);
    }
    if (!routing_id.empty()) socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.connect(endpoint);
    if (!say_hello) return;
    v1::Request hello;
    hello.mutable_hello()->set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    hello.mutable_hello()->set_client_name("raw");
    v1::Response r = Call(hello, {});
    EXPECT_TRUE(r.has_hello()) << r.DebugString();
    hello_ = r.hello();
  }
  const v1::HelloResponse& hello() const { return hello_; }
  // Sends the request (id 1 + requests so far) with `frames` after it;
  // returns its id.
  uint64_t Send(v1::Request request, const std::vector<std::string>& frames = {}) {
    request.set_request_id(++sent_);
    const std::string bytes = request.SerializeAsString();
    socket_.send(zmq::buffer(bytes), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    return sent_;
  }
  // Sends `bytes` as they are, in one frame (a malformed request).
  void SendBytes(const std::string& bytes) { socket_.send(zmq::buffer(bytes), zmq::send_flags::none); }
  // The next response (within 5 s), past the daemon's liveness probes
  // (request_id 0).
  v1::Response Receive() {
    while (true) {
      zmq::message_t reply;
      v1::Response response;
      EXPECT_TRUE(socket_.recv(reply, zmq::recv_flags::none));
      EXPECT_TRUE(response.ParseFromArray(reply.data(), static_cast<int>(reply.size())));
      const bool probe = response.request_id() == 0 && response.has_heartbeat() && response.status().code() == 0;
      if (!probe || reply.size() == 0) return response;
    }
  }
  // Send, then the response, which must answer it.
  v1::Response Call(v1::Request request, const std::vector<std::string>& frames) {
    const uint64_t id = Send(std::move(request), frames);
    v1::Response response = Receive();
    EXPECT_EQ(response.request_id(), id);
    return response;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  uint64_t sent_ = 0;
  v1::HelloResponse hello_;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_RAW_SESSION_H_
