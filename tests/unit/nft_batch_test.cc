// The Comet's ruleset as one nfnetlink batch (src/comet/nft_batch.h) against its reference, the
// text of nft_ruleset(): for plans covering every rule form, the text goes through libnftables
// into one fresh network namespace and the batch into another, and the kernel's listings of the
// two (JSON, and the bytecode of every rule as `nft --debug=netlink list ruleset` prints it,
// handles included) must be identical. Plus: a refused batch names the rule and the errno.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comet/network.h"
#include "comet/nft_batch.h"

namespace soyaos::comet {
namespace {

constexpr int kSkipStatus = 77;

EgressRule rule(const char* addr, uint16_t port, uint8_t proto, uint8_t prefix = 0) {
  EgressRule r;
  r.v6 = std::strchr(addr, ':') != nullptr;
  ::inet_pton(r.v6 ? AF_INET6 : AF_INET, addr, r.addr.data());
  r.port = port;
  r.proto = proto;
  r.prefix = prefix;
  return r;
}

// libnftables in this process, its output and errors buffered.
std::string nft_run(const std::string& cmd, unsigned output_flags, unsigned debug, bool* ok) {
  std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), &nft_ctx_free);
  nft_ctx_buffer_output(ctx.get());
  nft_ctx_buffer_error(ctx.get());
  nft_ctx_output_set_flags(ctx.get(), output_flags);
  nft_ctx_output_set_debug(ctx.get(), debug);
  *ok = nft_run_cmd_from_buffer(ctx.get(), cmd.c_str()) == 0;
  return std::string(nft_ctx_get_output_buffer(ctx.get())) + nft_ctx_get_error_buffer(ctx.get());
}

// The reference text as libnftables commands: the whole text at once, or, for a plan of more
// than `kRulesPerCommand` rules (libnftables, too, sends one datagram per command, and a plan
// past the send buffer is what the batch splits), the table with its empty chains and then
// "add rule" lines in groups, in the text's order, which is the batch's message order: the
// kernel then gives every object the handle it gives the batch's.
constexpr size_t kRulesPerCommand = 300;
std::vector<std::string> reference_commands(const NetworkPlan& plan) {
  const std::string text = nft_ruleset(plan);
  std::string skeleton;
  std::vector<std::string> rules;  // "add rule inet soyaos CHAIN RULE"
  std::string chain;
  for (size_t at = 0; at < text.size();) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(at, eol - at);
    at = eol + 1;
    if (line.rfind("\tchain ", 0) == 0) chain = line.substr(7, line.find(' ', 7) - 7);
    const bool rule_line = line.rfind("\t\t", 0) == 0 && line.rfind("\t\ttype ", 0) != 0;
    if (rule_line) {
      rules.push_back("add rule inet soyaos " + chain + " " + line.substr(2) + "\n");
    } else {
      skeleton += line + "\n";
    }
  }
  if (rules.size() <= kRulesPerCommand) return {text};
  std::vector<std::string> cmds = {skeleton};
  for (size_t i = 0; i < rules.size(); i += kRulesPerCommand) {
    std::string cmd;
    for (size_t j = i; j < std::min(rules.size(), i + kRulesPerCommand); ++j) cmd += rules[j];
    cmds.push_back(cmd);
  }
  return cmds;
}

// What a child said and how it ended (a waitpid() status; -1 when it could not be forked).
struct ChildReport {
  std::string out;
  int status = -1;
  [[nodiscard]] bool exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

// Ends the child with `status` after writing `text` to the parent.
using Say = std::function<void(const std::string& text, int status)>;

// Runs body(say) in a forked child with a network namespace of its own (and, without root, the
// user namespace that owns it). The body ends by say(); a child whose namespaces cannot be made
// says "SKIP unshare: ..." and exits kSkipStatus.
ChildReport in_fresh_netns(const std::function<void(const Say& say)>& body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {"FAIL pipe2"};
  const pid_t pid = ::fork();
  if (pid < 0) return {"FAIL fork"};
  if (pid == 0) {
    ::close(fds[0]);
    const Say say = [&](const std::string& s, int status) {
      (void)!::write(fds[1], s.data(), s.size());
      ::_exit(status);
    };
    if (::unshare(::geteuid() == 0 ? CLONE_NEWNET : CLONE_NEWUSER | CLONE_NEWNET) != 0) {
      say(std::string("SKIP unshare: ") + std::strerror(errno), kSkipStatus);
    }
    body(say);
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildReport r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

// In a fresh network namespace: installs the plan's ruleset (through libnftables when `text`,
// else as the batch) and returns the kernel's listings, or "SKIP ..." / "FAIL ...".
// `max_transaction`: the batch's bound per transaction (0: as the socket allows).
std::string listing_in_fresh_netns(const NetworkPlan& plan, bool text, size_t max_transaction = 0) {
  auto install_and_list = [&](const Say& say) {
    if (text) {
      for (const auto& cmd : reference_commands(plan)) {
        bool ok = false;
        std::string out = nft_run(cmd, 0, 0, &ok);
        if (!ok) say("FAIL libnftables: " + out, 1);
      }
    } else if (auto s = install_nft_batch(build_nft_batch(plan), max_transaction); !s) {
      say("FAIL batch: " + s.error().describe(), 1);
    }
    bool ok1 = false;
    bool ok2 = false;
    std::string json = nft_run("list ruleset", NFT_CTX_OUTPUT_JSON | NFT_CTX_OUTPUT_HANDLE, 0, &ok1);
    std::string bytecode = nft_run("list ruleset", NFT_CTX_OUTPUT_HANDLE, NFT_DEBUG_NETLINK, &ok2);
    if (!ok1 || !ok2) say("FAIL list ruleset: " + json + bytecode, 1);
    // One JSON object per line, so that a difference is reported as one object.
    for (size_t at = 0; (at = json.find("}}, {", at)) != std::string::npos; at += 5) json.replace(at, 5, "}},\n{");
    say(bytecode + "\n----\n" + json, 0);
  };
  return in_fresh_netns(install_and_list).out;
}

// The first line where two listings differ (a long listing's whole text would bury it).
std::string first_difference(const std::string& a, const std::string& b) {
  size_t line = 1;
  size_t at = 0;
  while (at < a.size() && at < b.size()) {
    const size_t ea = a.find('\n', at);
    const size_t eb = b.find('\n', at);
    const std::string la = a.substr(at, ea == std::string::npos ? std::string::npos : ea - at);
    const std::string lb = b.substr(at, eb == std::string::npos ? std::string::npos : eb - at);
    if (la != lb) return "line " + std::to_string(line) + ":\n  libnftables: " + la + "\n  batch:       " + lb;
    if (ea == std::string::npos) break;
    at = ea + 1;
    ++line;
  }
  return a.size() == b.size() ? "" : "lengths " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

struct Case {
  const char* name;
  NetworkPlan plan;
  size_t max_transaction = 0;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  all.push_back({"empty plan", NetworkPlan{}});

  NetworkPlan golden;  // tests/golden/network/ruleset.nft
  golden.redirect_tcp = {rule("198.18.0.1", 443, IPPROTO_TCP), rule("2001:db8::5", 443, IPPROTO_TCP)};
  golden.allow_udp = {rule("9.9.9.9", 53, IPPROTO_UDP), rule("2001:db8::53", 5353, IPPROTO_UDP)};
  all.push_back({"golden plan (v4, v6, UDP relays)", golden});

  NetworkPlan prefixes;  // byte-aligned and not, both families, and the full length
  for (uint8_t p : {1, 8, 15, 16, 24, 31, 32}) prefixes.redirect_tcp.push_back(rule("198.18.7.9", 443, IPPROTO_TCP, p));
  for (uint8_t p : {1, 47, 48, 64, 127, 128}) {
    prefixes.redirect_tcp.push_back(rule("2001:db8:1:2::9", 8443, IPPROTO_TCP, p));
  }
  prefixes.gateway_port = 40000;
  prefixes.nflog_group = 65535;
  all.push_back({"prefixes", prefixes});

  NetworkPlan star;  // egress "*", the Moon proxy, a v4-only UDP entry
  star.catch_all_tcp = true;
  star.proxy_port = 3128;
  star.allow_udp = {rule("127.0.0.53", 53, IPPROTO_UDP)};
  star.udp_relay_port = 20000;
  star.nflog_group = 0;
  all.push_back({"catch-all and proxy", star});

  NetworkPlan many;  // many entries: a long batch (many messages, many kernel answers)
  for (int i = 0; i < 200; ++i) {
    many.redirect_tcp.push_back(rule(("198.18." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)).c_str(),
                                     static_cast<uint16_t>(1 + i), IPPROTO_TCP));
  }
  for (size_t i = 0; i < kMaxUdpRelays; ++i) {
    many.allow_udp.push_back(rule(i % 2 ? "2001:db8::1" : "192.0.2.1", static_cast<uint16_t>(1000 + i), IPPROTO_UDP));
  }
  many.proxy_port = 15000;
  all.push_back({"many entries", many});

  // Past one datagram at the default send buffer (~440 redirects): the buffer is raised, or
  // the batch goes as several transactions; either way the same ruleset, handles included.
  NetworkPlan past_one_datagram;
  for (int i = 0; i < 1500; ++i) {
    past_one_datagram.redirect_tcp.push_back(
        rule(("198.19." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)).c_str(),
             static_cast<uint16_t>(443 + i % 2), IPPROTO_TCP));
  }
  past_one_datagram.allow_udp = {rule("192.0.2.53", 53, IPPROTO_UDP)};
  all.push_back({"past the default send buffer (1,500 redirects)", past_one_datagram});
  // The same as 12 transactions of at most 64 KiB: what a host whose wmem_max is below the
  // batch gets.
  all.push_back({"past one transaction (1,500 redirects, 64 KiB each)", past_one_datagram, size_t{64} * 1024});
  return all;
}

TEST(NftBatch, MatchesLibnftablesListing) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(validate_network_plan(c.plan).ok()) << validate_network_plan(c.plan).error().describe();
    const std::string reference = listing_in_fresh_netns(c.plan, true);
    if (reference.rfind("SKIP", 0) == 0) GTEST_SKIP() << reference;
    ASSERT_EQ(reference.rfind("FAIL", 0), std::string::npos) << reference;
    ASSERT_NE(reference.find("\"policy\": \"drop\""), std::string::npos) << reference;
    ASSERT_NE(reference.find("[ reject type 2 code 3 ]"), std::string::npos) << "no bytecode listing:\n" << reference;
    const std::string batch = listing_in_fresh_netns(c.plan, false, c.max_transaction);
    EXPECT_TRUE(reference == batch) << first_difference(reference, batch);
  }
}

// Every message in exactly one transaction, in order; each transaction framed by the batch's
// own BATCH_BEGIN and BATCH_END and within the bound.
TEST(NftBatch, SplitKeepsEveryMessageOnceInOrder) {
  NetworkPlan plan;
  for (int i = 0; i < 900; ++i) {
    plan.redirect_tcp.push_back(rule(("198.19." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1)).c_str(),
                                     443, IPPROTO_TCP));
  }
  const NftBatch b = build_nft_batch(plan);
  const size_t max_bytes = 64 * 1024;
  ASSERT_GT(b.bytes.size(), 2 * max_bytes);
  const auto parts = split_nft_batch(b, max_bytes);
  ASSERT_GE(parts.size(), 3u);
  std::vector<uint32_t> seqs;
  for (const auto& part : parts) {
    EXPECT_LE(part.size(), max_bytes);
    std::vector<const nlmsghdr*> msgs;
    for (size_t at = 0; at < part.size(); at += NLMSG_ALIGN(reinterpret_cast<const nlmsghdr*>(part.data() + at)->nlmsg_len)) {
      msgs.push_back(reinterpret_cast<const nlmsghdr*>(part.data() + at));
    }
    ASSERT_GE(msgs.size(), 3u);
    EXPECT_EQ(msgs.front()->nlmsg_type, NFNL_MSG_BATCH_BEGIN);
    EXPECT_EQ(msgs.back()->nlmsg_type, NFNL_MSG_BATCH_END);
    for (size_t i = 1; i + 1 < msgs.size(); ++i) seqs.push_back(msgs[i]->nlmsg_seq);
  }
  ASSERT_EQ(seqs.size(), b.what.size());
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i + 1);
  // One transaction when it fits.
  EXPECT_EQ(split_nft_batch(b, b.bytes.size()).size(), 1u);
}

// Bytes that are not BATCH_BEGIN, one message per `what`, BATCH_END are refused, never sent
// (in a fresh netns all the same).
TEST(NftBatch, AMalformedBatchIsRefusedNotSent) {
  NetworkPlan plan;
  plan.redirect_tcp = {rule("198.18.0.1", 443, IPPROTO_TCP)};
  const NftBatch good = build_nft_batch(plan);
  std::vector<NftBatch> bad(4, good);
  bad[0].bytes.resize(good.bytes.size() - 4);           // the last message cut short
  bad[1].bytes.resize(good.bytes.size() - 20);          // BATCH_END cut away
  bad[2].what.pop_back();                               // one message more than named
  reinterpret_cast<nlmsghdr*>(bad[3].bytes.data())->nlmsg_len = 0;  // a zero length
  for (const auto& b : bad) {
    EXPECT_TRUE(split_nft_batch(b, 1 << 20).empty());
    const ChildReport r = in_fresh_netns([&](const Say& say) {
      auto s = install_nft_batch(b);
      if (s) say("installed", 1);
      bool ok = false;
      const std::string listing = nft_run("list ruleset", 0, 0, &ok);
      if (listing.find("soyaos") != std::string::npos) say("sent: " + listing, 1);
      say(s.error().describe(), 0);
    });
    if (r.out.rfind("SKIP", 0) == 0) GTEST_SKIP() << r.out;
    EXPECT_NE(r.out.find("the batch is malformed"), std::string::npos) << r.out;
  }
}

TEST(NftBatch, NamesEveryMessage) {
  NetworkPlan plan;
  plan.redirect_tcp = {rule("198.18.0.0", 443, IPPROTO_TCP, 15)};
  const NftBatch b = build_nft_batch(plan);
  ASSERT_EQ(b.what.size(), b.needs.size());
  // table, 2 chains, 1 redirect, 8 filter rules
  ASSERT_EQ(b.what.size(), 12u);
  EXPECT_EQ(b.what[0], "table inet soyaos");
  EXPECT_EQ(b.what[3], "chain nat_output: ip daddr 198.18.0.0/15 tcp dport 443 redirect to :15001");
  EXPECT_EQ(b.what[11], "chain filter_output: reject with icmpx type admin-prohibited");
  // Every rule line of the reference text is named, in order.
  const std::string text = nft_ruleset(plan);
  size_t at = 0;
  for (size_t i = 3; i < b.what.size(); ++i) {
    const std::string line = "\t\t" + b.what[i].substr(b.what[i].find(": ") + 2) + "\n";
    at = text.find(line, at);
    ASSERT_NE(at, std::string::npos) << line;
  }
}

// A batch the kernel refuses is reported with its errno and what it refused: here from a
// process that owns its netns but holds no capability (as the agent after the credentials
// step), which nfnetlink refuses whole (EPERM, on the batch itself).
TEST(NftBatch, ARefusedBatchNamesTheErrno) {
  const ChildReport r = in_fresh_netns([](const Say& say) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[2] = {};
    if (::syscall(SYS_capset, &header, none) != 0) say(std::string("capset: ") + std::strerror(errno), 1);
    auto s = install_nft_batch(build_nft_batch(NetworkPlan{}));
    if (s) say("installed without CAP_NET_ADMIN", 1);
    if (s.error().err != EPERM) say("errno " + std::to_string(s.error().err) + ": " + s.error().describe(), 1);
    say(s.error().describe(), 0);
  });
  if (r.exited(kSkipStatus)) GTEST_SKIP() << r.out;
  ASSERT_TRUE(r.exited(0)) << r.out;
  EXPECT_NE(r.out.find("nftables: install ruleset: the kernel refused the batch: Operation not permitted"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace soyaos::comet
