// The Moon daemon against malformed requests: every request is a local user's JSON, and a
// field of an unexpected type must fail that request, never the daemon (one client's
// `{"op":"add_signature","signature":1}` once terminated it for every user: nlohmann's
// value() throws on a non-object, and nothing caught it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "moon_daemon_peers.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The requests the daemon serves (src/moon/server*.cc) and the fields they read.
const std::vector<std::string> kOps = {
    "active_flag", "add_approval", "add_signature", "append_events", "approvals_of", "claim_queued_flag", "find_by_digest",
    "flag",        "flag_publish_result", "flags", "get", "hello", "keep_manifest", "last_approval", "list",
    "manifest",    "oci_manifest", "pull", "push", "query_events", "queue_run_flag", "queued_flags",
    "received_flag", "run_begin", "run_end", "run_events", "run_flag", "signatures", "status", "unflag"};
// (Not `attachment`: a push's numeric one makes the daemon wait, as it should, for that many
// bytes — until the connection's idle timeout.)
const std::vector<std::string> kFields = {
    "approval", "digest", "dir",   "due",     "error",    "event",   "events",   "flag",
    "manifest", "name",       "origin", "query", "reason",  "referrer", "registry", "repository", "run_id",
    "signature", "version",   "violation", "id", "tree_digest", "manifest_digest", "reference"};

// Values of every JSON type but the expected one.
const std::vector<json> kWrongValues = {1, -1, 1.5, "x", json::array({1, "x", json::object({{"data", 1}})}),
                                        json::object(), nullptr, true};
// For the fields that hold a record: records whose members have the wrong types (a
// signature's or approval's `by`, a query's `first`, an event's `data`...).
const std::vector<std::string> kRecordFields = {"approval", "signature", "query", "event", "flag", "violation",
                                                "origin"};
std::vector<json> wrong_records() {
  std::vector<json> v;
  for (const char* k : {"by", "first", "data", "uid", "types", "cleared_by", "run_id", "type"}) {
    for (const json& inner : {json(1), json("x"), json::array()}) v.push_back({{k, inner}});
  }
  return v;
}

// Each test has a `soyaos moon serve` of its own, listening on sock_ by the time it starts.
class MoonDaemonInput : public ::testing::Test {
 protected:
  void SetUp() override {
    d_.start(home_, {"--socket", sock_}, log_);
    for (int i = 0; i < 500 && !fs::exists(sock_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(fs::exists(sock_)) << read_file(log_);
  }

  TempDir dir_;
  const std::string home_ = (dir_.path() / "home").string();
  const std::string sock_ = (dir_.path() / "moon.sock").string();
  const fs::path log_ = dir_.path() / "daemon.log";
  Daemon d_;
};

TEST_F(MoonDaemonInput, MalformedFieldsFailTheRequestNotTheDaemon) {

  const auto records = wrong_records();
  size_t sent = 0;
  for (const auto& op : kOps) {
    // The request without its fields, then one field at a time of a wrong type.
    std::vector<json> requests = {{{"op", op}}};
    for (const auto& field : kFields) {
      for (const auto& value : kWrongValues) requests.push_back({{"op", op}, {field, value}});
    }
    for (const auto& field : kRecordFields) {
      for (const auto& record : records) requests.push_back({{"op", op}, {field, record}});
    }
    // One connection while the daemon keeps it: it closes one only after a request that
    // failed as malformed (its reply says so), and a new one is opened then.
    std::unique_ptr<RawClient> c;
    for (const auto& req : requests) {
      if (!c) c = std::make_unique<RawClient>(sock_);
      ASSERT_TRUE(c->connected()) << "the daemon stopped answering after " << sent << " requests; the last was "
                                  << req.dump() << "\n" << read_file(log_);
      const std::string reply = c->call(req);
      ++sent;
      ASSERT_FALSE(reply.empty()) << "no reply to " << req.dump() << "\n" << read_file(log_);
      const json r = json::parse(reply, nullptr, false);
      ASSERT_TRUE(r.is_object() && r.contains("ok")) << req.dump() << " -> " << reply;
      if (reply.find("a malformed request") != std::string::npos) c.reset();
    }
  }
  // Still serving, as before: a well-formed request on a new connection.
  RawClient c(sock_);
  ASSERT_TRUE(c.connected()) << read_file(log_);
  const json st = json::parse(c.call({{"op", "status"}}), nullptr, false);
  EXPECT_EQ(st.value("ok", false), true) << st.dump();
  EXPECT_EQ(d_.wait(0), -1) << "the daemon exited: " << read_file(log_);
  EXPECT_GT(sent, 5000u);
}

// E7: the daemon's log line quotes what a client sent (here the op of its request) raw no
// more: escaped once where it is written, no ESC, BEL or CR byte in the log, a backslash
// shown as \\ (not doubled).
TEST_F(MoonDaemonInput, AClientsTextIsEscapedOnceInTheLog) {
  {
    RawClient c(sock_);
    ASSERT_TRUE(c.connected());
    EXPECT_NE(c.call({{"op", "o\x1b]0;t\a\r a\\b"}}), "");
  }
  const std::string shown = "o\\x1B]0;t\\x07\\r a\\\\b";
  std::string text;
  for (int i = 0; i < 250 && (text = read_file(log_)).find(shown) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const char c : {'\x1b', '\r', '\a'}) EXPECT_EQ(text.find(c), std::string::npos) << text;
  // The line names the op and the error quotes it: "OP by uid=...: unknown request 'OP'".
  EXPECT_NE(text.find("  " + shown + " by uid="), std::string::npos) << text;
  EXPECT_NE(text.find(": unknown request '" + shown + "'\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\\\\\\"), std::string::npos) << "escaped twice: " << text;
}

}  // namespace
}  // namespace soyaos::testing
