#include "comet/nft_batch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

// Every message of the batch fits in this many bytes (the longest rule, `ct status dnat ip6
// daddr ::1 tcp dport N accept`, is under 700).
constexpr size_t kMaxMessage = 2048;
constexpr const char* kTable = "soyaos";
constexpr const char* kNatChain = "nat_output";
constexpr const char* kFilterChain = "filter_output";
constexpr uint16_t kDnsPort = 53;

// nft's ct state bits (host byte order, as the kernel's NF_CT_STATE_*).
constexpr uint32_t kCtStateInvalid = 1;
constexpr uint32_t kCtStateEstablished = 2;
constexpr uint32_t kCtStateRelated = 4;
constexpr uint32_t kCtStatusDnat = 0x20;  // IPS_DST_NAT

void put_be32(nlmsghdr* nlh, uint16_t type, uint32_t value) { mnl_attr_put_u32(nlh, type, htonl(value)); }

std::string addr_text(const std::array<uint8_t, 16>& addr, bool v6) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
  return buf;
}

// The expressions of one NEWRULE message, in the shapes nft 1.0.6 gives the ruleset's text
// (each register is NFT_REG_1, the verdict register NFT_REG_VERDICT).
class RuleWriter {
 public:
  explicit RuleWriter(nlmsghdr* nlh) : nlh_(nlh), list_(mnl_attr_nest_start(nlh, NFTA_RULE_EXPRESSIONS)) {}
  void done() { mnl_attr_nest_end(nlh_, list_); }

  void meta(uint32_t key) {
    auto e = begin("meta");
    put_be32(nlh_, NFTA_META_KEY, key);
    put_be32(nlh_, NFTA_META_DREG, NFT_REG_1);
    end(e);
  }
  void cmp(uint32_t op, const void* data, size_t len) {
    auto e = begin("cmp");
    put_be32(nlh_, NFTA_CMP_SREG, NFT_REG_1);
    put_be32(nlh_, NFTA_CMP_OP, op);
    value(NFTA_CMP_DATA, data, len);
    end(e);
  }
  void payload(uint32_t base, uint32_t offset, uint32_t len) {
    auto e = begin("payload");
    put_be32(nlh_, NFTA_PAYLOAD_DREG, NFT_REG_1);
    put_be32(nlh_, NFTA_PAYLOAD_BASE, base);
    put_be32(nlh_, NFTA_PAYLOAD_OFFSET, offset);
    put_be32(nlh_, NFTA_PAYLOAD_LEN, len);
    end(e);
  }
  // reg1 = reg1 & mask (^ 0), as nft writes a prefix or a flag test.
  void bitwise_and(const void* mask, size_t len) {
    static constexpr std::array<uint8_t, 16> kZero{};
    auto e = begin("bitwise");
    put_be32(nlh_, NFTA_BITWISE_SREG, NFT_REG_1);
    put_be32(nlh_, NFTA_BITWISE_DREG, NFT_REG_1);
    put_be32(nlh_, NFTA_BITWISE_LEN, static_cast<uint32_t>(len));
    value(NFTA_BITWISE_MASK, mask, len);
    value(NFTA_BITWISE_XOR, kZero.data(), len);
    end(e);
  }
  void ct(uint32_t key) {
    auto e = begin("ct");
    put_be32(nlh_, NFTA_CT_KEY, key);
    put_be32(nlh_, NFTA_CT_DREG, NFT_REG_1);
    end(e);
  }
  void immediate_port(uint16_t port) {
    const uint16_t be = htons(port);
    auto e = begin("immediate");
    put_be32(nlh_, NFTA_IMMEDIATE_DREG, NFT_REG_1);
    value(NFTA_IMMEDIATE_DATA, &be, sizeof be);
    end(e);
  }
  void verdict(int code) {
    auto e = begin("immediate");
    put_be32(nlh_, NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
    nlattr* data = mnl_attr_nest_start(nlh_, NFTA_IMMEDIATE_DATA);
    nlattr* v = mnl_attr_nest_start(nlh_, NFTA_DATA_VERDICT);
    put_be32(nlh_, NFTA_VERDICT_CODE, static_cast<uint32_t>(code));
    mnl_attr_nest_end(nlh_, v);
    mnl_attr_nest_end(nlh_, data);
    end(e);
  }
  void redir() {
    auto e = begin("redir");
    put_be32(nlh_, NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
    put_be32(nlh_, NFTA_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
    end(e);
  }
  void log_group(uint16_t group) {
    auto e = begin("log");
    mnl_attr_put_u16(nlh_, NFTA_LOG_GROUP, htons(group));
    end(e);
  }
  void reject(uint32_t type, uint8_t code) {
    auto e = begin("reject");
    put_be32(nlh_, NFTA_REJECT_TYPE, type);
    mnl_attr_put_u8(nlh_, NFTA_REJECT_ICMP_CODE, code);
    end(e);
  }

  // ---- the matches of the ruleset's text, each as nft compiles it ----

  // `ip ...` / `ip6 ...` in an inet table: meta nfproto first.
  void family(bool v6) {
    const uint8_t proto = v6 ? NFPROTO_IPV6 : NFPROTO_IPV4;
    meta(NFT_META_NFPROTO);
    cmp(NFT_CMP_EQ, &proto, 1);
  }
  // `ip daddr A[/P]` / `ip6 daddr A[/P]` (op EQ or NEQ): a byte-aligned prefix loads only its
  // bytes; another prefix loads the whole address and masks it.
  void daddr(bool v6, const std::array<uint8_t, 16>& addr, uint8_t prefix, uint32_t op) {
    family(v6);
    const uint32_t full = v6 ? 16 : 4;
    const uint32_t offset = v6 ? 24 : 16;  // ip6 daddr / ip daddr in the network header
    if (prefix == 0 || prefix % 8 == 0) {
      const uint32_t len = prefix == 0 ? full : prefix / 8u;
      payload(NFT_PAYLOAD_NETWORK_HEADER, offset, len);
      cmp(op, addr.data(), len);
      return;
    }
    std::array<uint8_t, 16> mask{};
    std::array<uint8_t, 16> net{};
    for (uint32_t i = 0; i < full; ++i) {
      const int bits = static_cast<int>(prefix) - static_cast<int>(i) * 8;
      mask[i] = bits >= 8 ? 0xff : bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
      net[i] = addr[i] & mask[i];
    }
    payload(NFT_PAYLOAD_NETWORK_HEADER, offset, full);
    bitwise_and(mask.data(), full);
    cmp(op, net.data(), full);
  }
  // `meta l4proto P`, and with a port `tcp dport N` / `udp dport N`.
  void l4proto(uint8_t proto) {
    meta(NFT_META_L4PROTO);
    cmp(NFT_CMP_EQ, &proto, 1);
  }
  void dport(uint8_t proto, uint16_t port) {
    l4proto(proto);
    const uint16_t be = htons(port);
    payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
    cmp(NFT_CMP_EQ, &be, 2);
  }
  // `ct state a,b` / `ct status s`: (reg & flags) != 0.
  void ct_flags(uint32_t key, uint32_t flags) {
    const uint32_t zero = 0;
    ct(key);
    bitwise_and(&flags, sizeof flags);
    cmp(NFT_CMP_NEQ, &zero, sizeof zero);
  }
  void redirect_to(uint16_t port) {
    immediate_port(port);
    redir();
  }

 private:
  struct Open {
    nlattr* elem;
    nlattr* data;
  };
  Open begin(const char* name) {
    nlattr* elem = mnl_attr_nest_start(nlh_, NFTA_LIST_ELEM);
    mnl_attr_put_strz(nlh_, NFTA_EXPR_NAME, name);
    return {elem, mnl_attr_nest_start(nlh_, NFTA_EXPR_DATA)};
  }
  void end(Open e) {
    mnl_attr_nest_end(nlh_, e.data);
    mnl_attr_nest_end(nlh_, e.elem);
  }
  void value(uint16_t type, const void* data, size_t len) {
    nlattr* nest = mnl_attr_nest_start(nlh_, type);
    mnl_attr_put(nlh_, NFTA_DATA_VALUE, len, data);
    mnl_attr_nest_end(nlh_, nest);
  }

  nlmsghdr* nlh_;
  nlattr* list_;
};

class BatchBuilder {
 public:
  explicit BatchBuilder(size_t messages) { batch_.bytes.assign((messages + 2) * kMaxMessage, 0); }

  void begin_batch() { control(NFNL_MSG_BATCH_BEGIN); }
  void table() {
    nlmsghdr* nlh = message(NFT_MSG_NEWTABLE, NLM_F_CREATE, "table inet soyaos", "nf_tables (inet family)");
    mnl_attr_put_strz(nlh, NFTA_TABLE_NAME, kTable);
    put_be32(nlh, NFTA_TABLE_FLAGS, 0);
    advance(nlh);
  }
  void chain(const char* name, const char* type, int32_t priority, int policy, const char* needs) {
    nlmsghdr* nlh = message(NFT_MSG_NEWCHAIN, NLM_F_CREATE,
                            std::string("chain ") + name + " (type " + type + " hook output)", needs);
    mnl_attr_put_strz(nlh, NFTA_CHAIN_TABLE, kTable);
    mnl_attr_put_strz(nlh, NFTA_CHAIN_NAME, name);
    nlattr* hook = mnl_attr_nest_start(nlh, NFTA_CHAIN_HOOK);
    put_be32(nlh, NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT);
    put_be32(nlh, NFTA_HOOK_PRIORITY, static_cast<uint32_t>(priority));
    mnl_attr_nest_end(nlh, hook);
    put_be32(nlh, NFTA_CHAIN_POLICY, static_cast<uint32_t>(policy));
    mnl_attr_put_strz(nlh, NFTA_CHAIN_TYPE, type);
    advance(nlh);
  }
  // Starts a rule appended to `chain`; `text` is its line in nft_ruleset().
  RuleWriter rule(const char* chain, const std::string& text, const char* needs) {
    nlmsghdr* nlh = message(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, std::string("chain ") + chain + ": " + text,
                            needs);
    mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, kTable);
    mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, chain);
    open_ = nlh;
    return RuleWriter(nlh);
  }
  void end_rule(RuleWriter& r) {
    r.done();
    advance(open_);
  }
  NftBatch finish() {
    control(NFNL_MSG_BATCH_END);
    batch_.bytes.resize(used_);
    return std::move(batch_);
  }

 private:
  void control(uint16_t type) {
    nlmsghdr* nlh = mnl_nlmsg_put_header(batch_.bytes.data() + used_);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST;
    nlh->nlmsg_seq = 0;
    auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    nfg->nfgen_family = AF_UNSPEC;
    nfg->version = NFNETLINK_V0;
    nfg->res_id = htons(NFNL_SUBSYS_NFTABLES);
    used_ += nlh->nlmsg_len;
  }
  nlmsghdr* message(uint16_t type, uint16_t flags, std::string what, const char* needs) {
    nlmsghdr* nlh = mnl_nlmsg_put_header(batch_.bytes.data() + used_);
    nlh->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | type);
    nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    batch_.what.push_back(std::move(what));
    batch_.needs.emplace_back(needs);
    nlh->nlmsg_seq = static_cast<uint32_t>(batch_.what.size());  // 1-based: what[seq - 1]
    auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    nfg->nfgen_family = NFPROTO_INET;
    nfg->version = NFNETLINK_V0;
    nfg->res_id = 0;
    return nlh;
  }
  void advance(nlmsghdr* nlh) { used_ += nlh->nlmsg_len; }

  NftBatch batch_;
  size_t used_ = 0;
  nlmsghdr* open_ = nullptr;
};

std::string prefixed(const std::array<uint8_t, 16>& addr, bool v6, uint8_t prefix) {
  std::string s = addr_text(addr, v6);
  if (prefix != 0) s += "/" + std::to_string(prefix);
  return s;
}

constexpr const char* kNeedsRedirect = "nft_redir (redirect) and conntrack";
constexpr const char* kNeedsMatch = "nf_tables payload and meta matches";
constexpr const char* kNeedsCt = "nft_ct (conntrack state and status)";

}  // namespace

NftBatch build_nft_batch(const NetworkPlan& plan) {
  const uint16_t gw = plan.gateway_port;
  const std::string gws = std::to_string(gw);
  const size_t rules = plan.redirect_tcp.size() + 2 * plan.allow_udp.size() + 16;
  BatchBuilder b(rules + 3);
  b.begin_batch();
  b.table();
  // Both chains before the rules, in the order nft sends a table block (the kernel then
  // gives every object the same handle as libnftables would).
  b.chain(kNatChain, "nat", -100, NF_ACCEPT, "nft_chain_nat (a NAT chain) and conntrack");
  b.chain(kFilterChain, "filter", 0, NF_DROP, "nf_tables (an inet filter chain)");

  std::array<uint8_t, 16> loopback{};
  for (const auto& r : plan.redirect_tcp) {
    auto w = b.rule(kNatChain,
                    std::string(r.v6 ? "ip6" : "ip") + " daddr " + prefixed(r.addr, r.v6, r.prefix) + " tcp dport " +
                        std::to_string(r.port) + " redirect to :" + gws,
                    kNeedsRedirect);
    w.daddr(r.v6, r.addr, r.prefix, NFT_CMP_EQ);
    w.dport(IPPROTO_TCP, r.port);
    w.redirect_to(gw);
    b.end_rule(w);
  }
  if (plan.catch_all_tcp) {
    loopback = {127};
    auto w4 = b.rule(kNatChain, "ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :" + gws, kNeedsRedirect);
    w4.daddr(false, loopback, 8, NFT_CMP_NEQ);
    w4.l4proto(IPPROTO_TCP);
    w4.redirect_to(gw);
    b.end_rule(w4);
    loopback = {};
    loopback[15] = 1;
    auto w6 = b.rule(kNatChain, "ip6 daddr != ::1 meta l4proto tcp redirect to :" + gws, kNeedsRedirect);
    w6.daddr(true, loopback, 0, NFT_CMP_NEQ);
    w6.l4proto(IPPROTO_TCP);
    w6.redirect_to(gw);
    b.end_rule(w6);
  }
  for (size_t i = 0; i < plan.allow_udp.size(); ++i) {
    const auto& r = plan.allow_udp[i];
    const auto relay = static_cast<uint16_t>(plan.udp_relay_port + i);
    auto w = b.rule(kNatChain,
                    std::string(r.v6 ? "ip6" : "ip") + " daddr " + addr_text(r.addr, r.v6) + " udp dport " +
                        std::to_string(r.port) + " redirect to :" + std::to_string(relay),
                    kNeedsRedirect);
    w.daddr(r.v6, r.addr, 0, NFT_CMP_EQ);
    w.dport(IPPROTO_UDP, r.port);
    w.redirect_to(relay);
    b.end_rule(w);
  }

  {
    auto w = b.rule(kFilterChain, "ct state established,related accept", kNeedsCt);
    w.ct_flags(NFT_CT_STATE, kCtStateEstablished | kCtStateRelated);
    w.verdict(NF_ACCEPT);
    b.end_rule(w);
  }
  {
    auto w = b.rule(kFilterChain, "ct state invalid drop", kNeedsCt);
    w.ct_flags(NFT_CT_STATE, kCtStateInvalid);
    w.verdict(NF_DROP);
    b.end_rule(w);
  }
  std::array<uint8_t, 16> lo4{127, 0, 0, 1};
  std::array<uint8_t, 16> lo6{};
  lo6[15] = 1;
  auto dnat_accept = [&](bool v6, uint8_t proto, uint16_t port) {
    auto w = b.rule(kFilterChain,
                    std::string("ct status dnat ") + (v6 ? "ip6 daddr ::1" : "ip daddr 127.0.0.1") +
                        (proto == IPPROTO_TCP ? " tcp" : " udp") + " dport " + std::to_string(port) + " accept",
                    kNeedsCt);
    w.ct_flags(NFT_CT_STATUS, kCtStatusDnat);
    w.daddr(v6, v6 ? lo6 : lo4, 0, NFT_CMP_EQ);
    w.dport(proto, port);
    w.verdict(NF_ACCEPT);
    b.end_rule(w);
  };
  dnat_accept(false, IPPROTO_TCP, gw);
  bool v6_redirect = plan.catch_all_tcp;
  for (const auto& r : plan.redirect_tcp) v6_redirect = v6_redirect || r.v6;
  if (v6_redirect) dnat_accept(true, IPPROTO_TCP, gw);
  for (size_t i = 0; i < plan.allow_udp.size(); ++i) {
    dnat_accept(plan.allow_udp[i].v6, IPPROTO_UDP, static_cast<uint16_t>(plan.udp_relay_port + i));
  }
  auto local_accept = [&](uint8_t proto, uint16_t port) {
    auto w = b.rule(kFilterChain,
                    std::string("ip daddr 127.0.0.1 ") + (proto == IPPROTO_TCP ? "tcp" : "udp") + " dport " +
                        std::to_string(port) + " accept",
                    kNeedsMatch);
    w.daddr(false, lo4, 0, NFT_CMP_EQ);
    w.dport(proto, port);
    w.verdict(NF_ACCEPT);
    b.end_rule(w);
  };
  local_accept(IPPROTO_UDP, kDnsPort);
  local_accept(IPPROTO_TCP, kDnsPort);
  if (plan.proxy_port != 0) local_accept(IPPROTO_TCP, plan.proxy_port);
  {
    auto w = b.rule(kFilterChain, "log group " + std::to_string(plan.nflog_group),
                    "nft_log with nfnetlink_log (NFLOG)");
    w.log_group(static_cast<uint16_t>(plan.nflog_group));
    b.end_rule(w);
  }
  {
    auto w = b.rule(kFilterChain, "meta l4proto tcp reject with tcp reset", "nft_reject_inet (reject)");
    w.l4proto(IPPROTO_TCP);
    w.reject(NFT_REJECT_TCP_RST, 0);
    b.end_rule(w);
  }
  {
    auto w = b.rule(kFilterChain, "reject with icmpx type admin-prohibited", "nft_reject_inet (reject)");
    w.reject(NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
    b.end_rule(w);
  }
  return b.finish();
}

namespace {

// One nfnetlink transaction: `bytes` is BATCH_BEGIN, messages, BATCH_END in one datagram. The
// kernel runs it inside sendmsg() and queues its answers; ask for one ack, the last message's
// (errors come whatever the flags), so a long transaction cannot overrun the receive buffer
// with acks.
Status send_transaction(int fd, std::vector<char> bytes, const NftBatch& batch) {
  size_t last = 0;
  for (size_t at = 0; at < bytes.size();) {
    auto* nlh = reinterpret_cast<nlmsghdr*>(bytes.data() + at);
    if (nlh->nlmsg_seq != 0) last = at;
    at += NLMSG_ALIGN(nlh->nlmsg_len);
  }
  auto* last_msg = reinterpret_cast<nlmsghdr*>(bytes.data() + last);
  last_msg->nlmsg_flags |= NLM_F_ACK;
  const uint32_t last_seq = last_msg->nlmsg_seq;

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  const ssize_t sent =
      ::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
  if (sent < 0) return errno_error("nftables: send the ruleset batch");
  if (static_cast<size_t>(sent) != bytes.size()) return make_error("nftables: short send of the ruleset batch", EIO);

  std::array<char, 16384> buf{};
  bool acked = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return errno_error("nftables: read the kernel's answer to the ruleset batch");
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<nlmsghdr*>(buf.data()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nlmsgerr))) return make_error("nftables: truncated answer", EIO);
      const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      const uint32_t seq = err->msg.nlmsg_seq;
      if (err->error == 0) {
        acked = acked || seq == last_seq;
        continue;
      }
      const int e = -err->error;
      std::string what = "the batch";
      std::string needs;
      if (seq >= 1 && seq <= batch.what.size()) {
        what = batch.what[seq - 1];
        // The errnos of a kernel without the feature: no such expression, chain type or family.
        if (e == ENOENT || e == EOPNOTSUPP || e == EAFNOSUPPORT) needs = batch.needs[seq - 1];
      }
      return make_error("nftables: install ruleset: the kernel refused " + what + ": " + std::strerror(e) +
                            (needs.empty() ? std::string() : " (is the kernel missing " + needs + "?)"),
                        e);
    }
  }
  if (!acked) return make_error("nftables: install ruleset: the kernel did not acknowledge the batch", EPROTO);
  return {};
}

}  // namespace

std::vector<std::vector<char>> split_nft_batch(const NftBatch& batch, size_t max_bytes) {
  // The messages, by offset: they must tile the bytes exactly, as BATCH_BEGIN, one message
  // per what[] entry, BATCH_END; anything else is no batch of build_nft_batch's (nothing).
  std::vector<std::pair<size_t, size_t>> messages;  // offset, aligned length
  size_t at = 0;
  while (at + sizeof(nlmsghdr) <= batch.bytes.size()) {
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(batch.bytes.data() + at);
    const size_t len = NLMSG_ALIGN(nlh->nlmsg_len);
    if (nlh->nlmsg_len < sizeof(nlmsghdr) || len > batch.bytes.size() - at) return {};
    messages.emplace_back(at, len);
    at += len;
  }
  if (at != batch.bytes.size() || messages.size() != batch.what.size() + 2) return {};
  std::vector<std::vector<char>> out;
  // Plain variables, not structured bindings: clang 14 (the sanitizer build) cannot capture those.
  const size_t begin_at = messages.front().first;
  const size_t begin_len = messages.front().second;
  const size_t end_at = messages.back().first;
  const size_t end_len = messages.back().second;
  std::vector<char> current;
  auto open = [&] { current.assign(batch.bytes.begin() + static_cast<std::ptrdiff_t>(begin_at),
                                   batch.bytes.begin() + static_cast<std::ptrdiff_t>(begin_at + begin_len)); };
  auto close = [&] {
    current.insert(current.end(), batch.bytes.begin() + static_cast<std::ptrdiff_t>(end_at),
                   batch.bytes.begin() + static_cast<std::ptrdiff_t>(end_at + end_len));
    out.push_back(std::move(current));
  };
  open();
  size_t in_current = 0;
  for (size_t i = 1; i + 1 < messages.size(); ++i) {
    const size_t msg_at = messages[i].first;
    const size_t len = messages[i].second;
    // A message joins the transaction while BEGIN + messages + END fit; a transaction holds
    // at least one message whatever its size (the kernel then names what it refuses).
    if (in_current > 0 && current.size() + len + end_len > max_bytes) {
      close();
      open();
      in_current = 0;
    }
    current.insert(current.end(), batch.bytes.begin() + static_cast<std::ptrdiff_t>(msg_at),
                   batch.bytes.begin() + static_cast<std::ptrdiff_t>(msg_at + len));
    ++in_current;
  }
  close();
  return out;
}

Status install_nft_batch(const NftBatch& batch, size_t max_transaction) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!fd) return errno_error("nftables: socket(NETLINK_NETFILTER)");
  // A netlink datagram must fit the socket's send buffer (less the 32 bytes netlink_sendmsg
  // keeps back). It starts at net.core.wmem_default (208 KiB: ~440 redirected TCP
  // destinations); SO_SNDBUF raises it, without a capability, up to twice net.core.wmem_max,
  // so that the ruleset stays one transaction, which the kernel applies whole or not at all.
  // Past what the host allows, the batch goes as several transactions in order: table and
  // chains first, then the rules, each appended where the one batch would have put it, so
  // the kernel holds the same ruleset, handles included. Only the all-or-nothing of one
  // transaction is lost, and nothing depends on it: the filter chain's policy is drop from
  // the first transaction on, a refused transaction refuses the run (C1, exit 125), and the
  // netns, with whatever part was installed, dies with the child; no agent code runs before.
  const size_t want = batch.bytes.size() + 4096;
  if (want <= static_cast<size_t>(INT32_MAX / 2)) {
    const int request = static_cast<int>(want);
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &request, sizeof request);  // capped by the kernel
  }
  int sndbuf = 0;
  socklen_t optlen = sizeof sndbuf;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, &optlen) != 0) {
    return errno_error("nftables: getsockopt(SO_SNDBUF)");
  }
  size_t max_bytes = sndbuf > 4096 ? static_cast<size_t>(sndbuf) - 1024 : 3072;
  if (max_transaction != 0) max_bytes = std::min(max_bytes, max_transaction);
  auto transactions = split_nft_batch(batch, max_bytes);
  if (transactions.empty()) return make_error("nftables: install ruleset: the batch is malformed", EINVAL);
  for (auto& transaction : transactions) {
    if (auto s = send_transaction(fd.get(), std::move(transaction), batch); !s) return s;
  }
  return {};
}

}  // namespace soyaos::comet
