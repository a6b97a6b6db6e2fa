// run_http_exchange (http_exchange.h): one intercepted connection, both directions on one
// thread. The agent's bytes are parsed as a sequence of requests: each head is checked by
// gate_request before any of it goes upstream (keep-alive and pipelined requests alike), its
// body is framed and forwarded as it arrives. The upstream's bytes are parsed as the matching
// sequence of responses, forwarded as they arrive (an SSE stream is never held back), with
// 1xx passed through and a websocket 101 turning the connection into a raw relay.

#include "supervisor/http_exchange.h"

#include <poll.h>
#include <cerrno>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <memory>

#include "network/http_message.h"
#include "network/http_syntax.h"
#include "supervisor/http_gate.h"
#include "supervisor/secret_echo_guard.h"

namespace soyaos::supervisor {
namespace {

constexpr size_t kReadChunk = 16384;
constexpr size_t kMaxPending = size_t{256} * 1024;  // bytes waiting for the other side before reading stops
constexpr size_t kMaxInFlight = 64;                  // pipelined requests awaiting responses
constexpr int kDrainMs = 1000;                       // after a 403: read and drop the agent's rest this long
constexpr size_t kDrainBytes = size_t{1} << 20;      // ... or this much

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::vector<SecretEchoGuard::Secret> guard_secrets(const HttpExchangePolicy& policy) {
  std::vector<SecretEchoGuard::Secret> out;
  for (const HttpSecretBinding& b : policy.secrets) out.push_back({b.name, b.value});
  return out;
}

// The content or transfer coding (other than identity and chunked) a response body carries,
// or "" when its bytes are the content itself and can be scanned.
std::string body_coding(const network::HttpResponseHead& head) {
  using network::http_syntax::iequals;
  for (const auto& [name, value] : head.fields) {
    if (!iequals(name, "content-encoding") && !iequals(name, "transfer-encoding")) continue;
    std::string_view list = value;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      item = item.substr(0, item.find(';'));
      if (!item.empty() && !iequals(item, "identity") && !iequals(item, "chunked")) return std::string(item);
    }
  }
  return "";
}

// One direction's stream and what waits to be written to it.
struct Side {
  ByteStream& s;
  std::string in;        // read from s, not yet processed
  std::string out;       // to write to s
  size_t out_off = 0;
  bool eof = false;      // s sent its last byte
  bool shut = false;     // our write side of s is shut down
  bool want_shut = false;  // shut it once `out` is written
  bool hup = false;      // poll reported POLLHUP while we did not ask for input
  short read_wants = POLLIN, write_wants = POLLOUT;
  [[nodiscard]] size_t pending() const { return out.size() - out_off; }
};

struct Request {
  std::string method, path;
  int64_t started = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
  int status = 0;
  bool upgrade = false;
  bool sent = false, answered = false, emitted = false;
};

class Exchange {
 public:
  Exchange(ByteStream& agent, ByteStream& upstream, const HttpExchangePolicy& policy, const HttpExchangeCallbacks& cb,
           int stop_fd)
      : a_{agent},
        u_{upstream},
        policy_(policy),
        cb_(cb),
        stop_fd_(stop_fd),
        guard_(guard_secrets(policy)),
        carries_secret_(std::any_of(policy.secrets.begin(), policy.secrets.end(),
                                    [](const HttpSecretBinding& b) { return b.bound_to_this_host; })) {}

  void run();

 private:
  enum class ReqPhase { head, body, wait_upgrade, refused, raw };
  enum class RespPhase { head, body, raw };

  bool read_side(Side& side);
  bool flush(Side& side);
  void process_requests();
  void process_responses();
  void refuse(const GateDecision& d);
  void complete_response();
  void maybe_emit(Request& r);
  void switch_to_raw();
  void begin_close() { closing_ = true; }
  bool wants_read(const Side& side) const;
  void drain_agent();
  void note_echo(std::string_view secret);
  void refuse_coded_response(Request& r, const std::string& coding);

  Side a_, u_;
  const HttpExchangePolicy& policy_;
  const HttpExchangeCallbacks& cb_;
  int stop_fd_;
  ReqPhase req_ = ReqPhase::head;
  RespPhase resp_ = RespPhase::head;
  network::BodyFramer req_body_, resp_body_;
  std::shared_ptr<Request> sending_;                 // the request whose body is being forwarded
  std::deque<std::shared_ptr<Request>> awaiting_;    // requests sent, responses not complete
  std::string denied_;                               // a 403 to send once earlier responses are out
  int64_t head_started_ = 0;
  int64_t last_activity_ = now_ms();
  bool closing_ = false;  // stop reading; write what is queued, shut down, return
  bool failed_ = false;   // an I/O error or a framing error: return at once
  bool refused_ = false;
  SecretEchoGuard guard_;        // every response byte to the agent goes through it
  int64_t held_since_ = 0;       // when what guard_ holds began to wait (0: nothing held)
  bool carries_secret_ = false;  // a secret is bound to this host: responses must be identity-coded
  bool echo_reported_ = false;
  std::string echo_method_, echo_path_;  // the request whose response is being read
};

bool Exchange::wants_read(const Side& side) const {
  if (side.eof || closing_ || failed_) return false;
  if (&side == &a_) {
    if (req_ == ReqPhase::wait_upgrade || req_ == ReqPhase::refused) return false;
    if (u_.pending() >= kMaxPending || a_.in.size() > network::kHttpMaxHead) return false;
    return !(req_ == ReqPhase::head && awaiting_.size() >= kMaxInFlight);
  }
  return a_.pending() < kMaxPending && u_.in.size() <= network::kHttpMaxHead;
}

bool Exchange::read_side(Side& side) {
  if (!wants_read(side)) return false;
  std::array<uint8_t, kReadChunk> buf{};
  const IoResult r = side.s.read(buf);
  switch (r.status) {
    case IoStatus::ok:
      side.in.append(reinterpret_cast<const char*>(buf.data()), r.n);
      last_activity_ = now_ms();
      return true;
    case IoStatus::would_block: side.read_wants = side.s.wanted_events(); return false;
    case IoStatus::eof: side.eof = true; return true;
    case IoStatus::error: failed_ = true; return true;
  }
  return false;
}

bool Exchange::flush(Side& side) {
  bool progress = false;
  while (side.pending() > 0 && !failed_) {
    const IoResult r = side.s.write(as_bytes(std::string_view(side.out).substr(side.out_off)));
    if (r.status == IoStatus::would_block) {
      side.write_wants = side.s.wanted_events();
      break;
    }
    if (r.status != IoStatus::ok) {
      failed_ = true;
      return true;
    }
    side.out_off += r.n;
    progress = progress || r.n > 0;
    last_activity_ = now_ms();
  }
  if (side.pending() == 0) {
    side.out.clear();
    side.out_off = 0;
    if (side.want_shut && !side.shut) {
      const IoResult r = side.s.shutdown_write();
      if (r.status == IoStatus::ok) {
        side.shut = true;
        progress = true;
      } else if (r.status == IoStatus::would_block) {
        side.write_wants = side.s.wanted_events();
      } else {
        side.shut = true;  // the peer is gone: nothing more to say to it either way
      }
    }
  } else if (side.out_off > kMaxPending) {
    side.out.erase(0, side.out_off);
    side.out_off = 0;
  }
  return progress;
}

void Exchange::maybe_emit(Request& r) {
  if (r.emitted || !r.sent || !r.answered) return;
  r.emitted = true;
  if (!cb_.on_request) return;
  HttpRequestRecord rec;
  rec.method = r.method;
  rec.path = r.path;
  rec.status = r.status;
  rec.bytes_up = r.bytes_up;
  rec.bytes_down = r.bytes_down;
  rec.duration_ms = static_cast<uint64_t>(std::max<int64_t>(0, now_ms() - r.started));
  cb_.on_request(rec);
}

void Exchange::refuse(const GateDecision& d) {
  refused_ = true;
  req_ = ReqPhase::refused;
  if (cb_.on_refusal) cb_.on_refusal(HttpRefusal{d.method, d.path, d.rule, d.reason});
  denied_ = denied_response(d.rule, d.reason);
  a_.in.clear();
}

void Exchange::process_requests() {
  while (!failed_ && !closing_) {
    if (req_ == ReqPhase::raw) {
      u_.out += a_.in;
      a_.in.clear();
      return;
    }
    if (req_ == ReqPhase::head) {
      if (a_.in.empty()) {
        head_started_ = 0;
        return;
      }
      if (head_started_ == 0) head_started_ = now_ms();
      const network::HttpHeadParse parse = network::parse_http_head(as_bytes(a_.in));
      if (parse.status == network::ParseStatus::need_more && !a_.eof) return;
      const GateDecision d = gate_request(parse, policy_);
      if (!d.allowed) {
        if (parse.status == network::ParseStatus::need_more) {  // the agent ended mid-head: nothing to answer
          a_.in.clear();
          return;
        }
        refuse(d);
        return;
      }
      auto r = std::make_shared<Request>();
      r->method = d.method;
      r->path = d.path;
      r->started = head_started_;
      r->bytes_up = parse.head.head_size;
      r->upgrade = d.traits.upgrade;
      u_.out += d.upstream_head;
      a_.in.erase(0, parse.head.head_size);
      head_started_ = 0;
      awaiting_.push_back(r);
      sending_ = r;
      req_body_ = network::BodyFramer(d.traits.body);
      req_ = ReqPhase::body;
    }
    if (req_ == ReqPhase::body) {
      if (!req_body_.done()) {
        if (a_.in.empty()) return;
        const network::BodyFramer::Step step = req_body_.feed(as_bytes(a_.in));
        u_.out.append(a_.in, 0, step.consumed);
        sending_->bytes_up += step.consumed;
        a_.in.erase(0, step.consumed);
        if (!step.error.empty()) {
          // The head already went upstream: there is no clean answer to give, only an end.
          if (cb_.on_refusal) cb_.on_refusal(HttpRefusal{sending_->method, sending_->path, policy_.manifest_entry, step.error});
          failed_ = true;
          return;
        }
        if (!step.done) return;
      }
      sending_->sent = true;
      const bool upgrade = sending_->upgrade;
      maybe_emit(*sending_);
      sending_.reset();
      req_ = upgrade ? ReqPhase::wait_upgrade : ReqPhase::head;
      continue;
    }
    return;  // wait_upgrade, refused: the agent's bytes wait
  }
}

void Exchange::complete_response() {
  std::shared_ptr<Request> r = awaiting_.front();
  awaiting_.pop_front();
  r->answered = true;
  maybe_emit(*r);
  resp_ = RespPhase::head;
  if (r->upgrade && req_ == ReqPhase::wait_upgrade) {
    req_ = ReqPhase::head;  // not upgraded: the next bytes are a request again
    process_requests();
  }
}

void Exchange::switch_to_raw() {
  req_ = ReqPhase::raw;
  resp_ = RespPhase::raw;
  u_.out += a_.in;
  a_.in.clear();
  note_echo(guard_.feed_data(u_.in, a_.out));
  u_.in.clear();
}

// The guard masked a secret's value on its way to the agent: the agent made the host send
// it back (a reflected path, header or stored value). Once per connection is enough to end
// the run in a violation; the masking goes on for every further copy.
void Exchange::note_echo(std::string_view secret) {
  if (secret.empty() || echo_reported_) return;
  echo_reported_ = true;
  if (cb_.on_secret_echo) {
    cb_.on_secret_echo(HttpRefusal{echo_method_, echo_path_, "secrets." + std::string(secret),
                                   "the response carried the value of secret " + std::string(secret) + "; masked"});
  }
}

// A coded body (gzip, br, ...) on a connection that carries a secret: the guard cannot read
// it, so it does not go to the agent. The server's choice (it was asked for identity), not
// the agent's: an http_request with 502, no violation.
void Exchange::refuse_coded_response(Request& r, const std::string& coding) {
  const std::string answer = denied_response(
      policy_.manifest_entry,
      "the response is coded (`" + coding + "`): the gateway cannot check it for a secret's value (it asked for identity)",
      "502 Bad Gateway");
  a_.out += answer;
  r.bytes_down += answer.size();
  r.status = 502;
  r.answered = true;
  maybe_emit(r);
  awaiting_.clear();
  u_.in.clear();
  a_.want_shut = true;
  refused_ = true;
  req_ = ReqPhase::refused;
  begin_close();
}

void Exchange::process_responses() {
  while (!failed_) {
    if (resp_ == RespPhase::raw) {
      note_echo(guard_.feed_data(u_.in, a_.out));
      u_.in.clear();
      return;
    }
    if (resp_ == RespPhase::head) {
      if (u_.in.empty()) return;
      const network::HttpResponseParse parse = network::parse_http_response_head(as_bytes(u_.in));
      if (parse.status == network::ParseStatus::need_more) return;
      if (parse.status == network::ParseStatus::invalid || awaiting_.empty()) {
        failed_ = true;  // an upstream we cannot frame: what follows could be read as anything
        return;
      }
      Request& r = *awaiting_.front();
      echo_method_ = r.method;
      echo_path_ = r.path;
      const size_t size = parse.head.head_size;
      if (carries_secret_ && parse.head.status >= 200 &&
          network::response_body(r.method, parse.head).kind != network::BodyKind::none) {
        if (const std::string coding = body_coding(parse.head); !coding.empty()) {
          refuse_coded_response(r, coding);
          return;
        }
      }
      note_echo(guard_.feed_data(std::string_view(u_.in).substr(0, size), a_.out));
      guard_.release(a_.out);  // a head goes out whole: the agent may need it before the body
      u_.in.erase(0, size);
      r.bytes_down += size;
      if (parse.head.status == 101) {
        if (!r.upgrade || !network::response_is_upgrade(parse.head) || req_ != ReqPhase::wait_upgrade) {
          failed_ = true;
          return;
        }
        r.status = 101;
        r.answered = true;
        maybe_emit(r);
        awaiting_.pop_front();
        switch_to_raw();
        return;
      }
      if (parse.head.status < 200) continue;  // 100 Continue, 103 Early Hints: the final one follows
      r.status = parse.head.status;
      resp_body_ = network::BodyFramer(network::response_body(r.method, parse.head));
      resp_ = RespPhase::body;
    }
    if (!resp_body_.done()) {
      if (u_.in.empty()) return;
      const network::BodyFramer::Step step = resp_body_.feed(as_bytes(u_.in));
      note_echo(guard_.feed(std::string_view(u_.in).substr(0, step.consumed), step.data, a_.out));
      if (step.done) guard_.release(a_.out);
      awaiting_.front()->bytes_down += step.consumed;
      u_.in.erase(0, step.consumed);
      if (!step.error.empty()) {
        failed_ = true;
        return;
      }
      if (!step.done) return;
    }
    complete_response();
  }
}

void Exchange::drain_agent() {
  // The agent may still be sending the refused request's body: closing with unread bytes
  // would reset the connection, and the reset can destroy the 403 before the agent reads it.
  const int64_t until = now_ms() + kDrainMs;
  size_t drained = 0;
  std::array<uint8_t, kReadChunk> buf{};
  while (drained < kDrainBytes) {
    const IoResult r = a_.s.read(buf);
    if (r.status == IoStatus::ok) {
      drained += r.n;
      continue;
    }
    if (r.status != IoStatus::would_block) return;
    const int64_t left = until - now_ms();
    if (left <= 0) return;
    std::array<pollfd, 2> p{{{a_.s.fd(), a_.s.wanted_events(), 0}, {stop_fd_, POLLIN, 0}}};
    if (::poll(p.data(), stop_fd_ >= 0 ? 2 : 1, static_cast<int>(left)) <= 0 || p[1].revents != 0) return;
  }
}

void Exchange::run() {
  for (;;) {
    bool progress = true;
    while (progress && !failed_) {
      progress = false;
      progress = flush(u_) || progress;
      progress = flush(a_) || progress;
      if (read_side(a_)) {
        progress = true;
        process_requests();
      }
      if (read_side(u_)) {
        progress = true;
        process_responses();
      }
      // Lifecycle decisions once the data is processed.
      if (denied_.size() > 0 && awaiting_.empty() && resp_ != RespPhase::body) {
        a_.out += denied_;
        denied_.clear();
        a_.want_shut = true;
        begin_close();
        progress = true;
      }
      if (req_ == ReqPhase::raw) {
        if (a_.eof && a_.in.empty() && !u_.want_shut) {
          u_.want_shut = true;
          progress = true;
        }
        if (u_.eof && u_.in.empty() && !a_.want_shut) {
          guard_.release(a_.out);
          a_.want_shut = true;
          progress = true;
        }
        if (a_.eof && u_.eof && u_.shut && a_.shut) return;
      } else if (!closing_) {
        if (u_.eof) {
          if (resp_ == RespPhase::body && resp_body_.eof_ok() && u_.in.empty()) complete_response();
          guard_.release(a_.out);  // a body that ended with the connection: its held tail
          // Whatever is owed to the agent is queued: pass the upstream's end on.
          a_.want_shut = true;
          begin_close();
          progress = true;
        } else if (a_.eof && !refused_) {
          if (!u_.want_shut && (req_ == ReqPhase::head || req_ == ReqPhase::body)) {
            u_.want_shut = true;  // the agent half-closed: so does the upstream's side, after the last byte
            progress = true;
          }
          if (awaiting_.empty() && resp_ == RespPhase::head) {
            a_.want_shut = true;
            begin_close();
            progress = true;
          }
        }
      }
      if (closing_ && a_.pending() == 0 && u_.pending() == 0 && (!a_.want_shut || a_.shut) &&
          (!u_.want_shut || u_.shut)) {
        if (refused_) drain_agent();
        return;
      }
    }
    if (failed_) return;

    const int64_t now = now_ms();
    // What the echo guard holds waits at most kHoldMs for the next bytes (secret_echo_guard.h):
    // a deadline that depends on time only, never on what the bytes are.
    if (guard_.held() == 0) {
      held_since_ = 0;
    } else if (held_since_ == 0) {
      held_since_ = now;
    } else if (now >= held_since_ + SecretEchoGuard::kHoldMs) {
      guard_.release(a_.out);
      held_since_ = 0;
      continue;  // write it out
    }

    // Wait for something to happen.
    int64_t deadline = last_activity_ + policy_.idle_timeout_ms;
    if (req_ == ReqPhase::head && head_started_ != 0 && !closing_) {
      deadline = std::min<int64_t>(deadline, head_started_ + policy_.head_timeout_ms);
    }
    if (now >= deadline) return;  // idle, or a request head that never completed
    std::array<pollfd, 3> p{};
    auto arm = [&](pollfd& pfd, Side& side) {
      short ev = 0;
      if (wants_read(side)) ev = static_cast<short>(ev | side.read_wants);
      if (side.pending() > 0 || (side.want_shut && !side.shut)) ev = static_cast<short>(ev | side.write_wants);
      pfd = {side.hup && ev == 0 ? -1 : side.s.fd(), ev, 0};
    };
    arm(p[0], a_);
    arm(p[1], u_);
    p[2] = {stop_fd_, POLLIN, 0};
    int timeout = static_cast<int>(std::min<int64_t>(deadline - now, 60'000));
    if (held_since_ != 0) timeout = static_cast<int>(std::clamp<int64_t>(held_since_ + SecretEchoGuard::kHoldMs - now, 0, timeout));
    if ((wants_read(a_) && a_.s.has_buffered_input()) || (wants_read(u_) && u_.s.has_buffered_input())) timeout = 0;
    const int n = ::poll(p.data(), stop_fd_ >= 0 ? 3 : 2, timeout);
    if (n < 0 && errno != EINTR) return;
    if (stop_fd_ >= 0 && p[2].revents != 0) return;
    for (size_t i = 0; i < 2; ++i) {
      Side& side = i == 0 ? a_ : u_;
      if ((p[i].revents & (POLLERR | POLLNVAL)) != 0 && p[i].fd >= 0) {
        // A reset or a dead descriptor: a read or write says which, unless nothing is asked of it.
        if ((p[i].events & (POLLIN | POLLOUT)) == 0) return;
      }
      if ((p[i].revents & POLLHUP) != 0 && (p[i].events & POLLIN) == 0) side.hup = true;
    }
  }
}

}  // namespace

void run_http_exchange(ByteStream& agent, ByteStream& upstream, const HttpExchangePolicy& policy,
                       const HttpExchangeCallbacks& callbacks, int stop_fd) {
  Exchange(agent, upstream, policy, callbacks, stop_fd).run();
}

}  // namespace soyaos::supervisor
