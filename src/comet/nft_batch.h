// The Comet's nftables ruleset as one nfnetlink batch, built and sent with libmnl (issue #16):
// the same table, chains and rules as nft_ruleset(plan)'s text, expression for expression as
// nft 1.0.6 compiles that text (`nft --debug=netlink`), without libnftables (its dlopen, its
// parser and evaluator, its cache of the kernel's state) and without libnftnl. nft_ruleset()
// stays the documented reference; NftBatch.MatchesLibnftablesListing (unit test) installs both
// in two fresh network namespaces and compares the kernel's listings.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comet/network.h"
#include "common/result.h"

namespace soyaos::comet {

struct NftBatch {
  std::vector<char> bytes;          // BATCH_BEGIN, NEWTABLE, 2 x NEWCHAIN, NEWRULE..., BATCH_END
  std::vector<std::string> what;    // what[seq - 1]: the message with that sequence number, as
                                    // nft_ruleset() writes it (`chain filter_output: log group 7`)
  std::vector<std::string> needs;   // needs[seq - 1]: the kernel features that message uses
};

// Plain data, no syscalls; the plan must pass validate_network_plan().
NftBatch build_nft_batch(const NetworkPlan& plan);

// Sends the batch on a NETLINK_NETFILTER socket of the calling thread's netns and reads the
// kernel's answers (processed during sendmsg). The socket's send buffer is raised to hold the
// batch where the host allows (SO_SNDBUF, up to twice net.core.wmem_max): then it is one
// transaction, which the kernel applies whole or not at all; past that (or past
// `max_transaction` bytes when not 0: tests) it goes as several in order (split_nft_batch),
// which end in the same ruleset. An error names the refused message, the netlink errno and
// the kernel features it needs; a batch that is not build_nft_batch's shape is refused.
Status install_nft_batch(const NftBatch& batch, size_t max_transaction = 0);

// The batch as transactions of at most `max_bytes` each (BATCH_BEGIN, messages in their
// order, BATCH_END), every message in exactly one; nothing when the bytes are not exactly
// BATCH_BEGIN, one message per `what` entry, BATCH_END. Exposed for tests.
std::vector<std::vector<char>> split_nft_batch(const NftBatch& batch, size_t max_bytes);

}  // namespace soyaos::comet
