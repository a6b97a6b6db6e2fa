// What `soyaos pack learn` proposes (SPEC.md C13): the attempts its runs observed beyond the
// manifest turned into the manifest entries that would allow them, bounded whatever the
// agent did (docs/cli.md § soyaos pack learn, "Proposal rules").
//
// The entries are derived by the rule set of `soyaos run`'s "to allow" hints
// (grant_proposal.h: the shortest sensible prefix for paths, never `/` nor a path the
// Comet owns, host + port + protocol entries). What is learning's own is which observations
// are attempts to grant: a name the DNS stub answered with a learning address is a lookup
// (with a connection to it: one entry; without: listed as a name only, not proposed), a
// connection the gateway classified is a connection as seen, and what neither rule set can
// name (a refused name, a fake address) is a note. What the manifest allows already is
// never proposed; each list is capped (kMaxProposed), the rest counted, never dropped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::policy {

inline constexpr size_t kMaxProposed = 32;    // entries per list (egress, fs.read, fs.write)
inline constexpr size_t kMaxListed = 20;      // not grantable, names only, notes
inline constexpr size_t kMaxObservations = 20000;  // distinct observations kept across rounds

// One attempt a learn run observed (a `learn_observed` event's data).
struct Observation {
  std::string surface, access, resource, syscall, errno_name, detail;
};

struct ProposedPath {
  std::string path;
  std::string why;  // "example basic: read /srv/data.txt"
};

struct ProposedEgress {
  manifest::EgressEntry entry;  // host, port, protocol (key_path empty)
  std::string why;
};

struct Proposal {
  std::vector<ProposedEgress> egress;
  std::vector<ProposedPath> fs_read, fs_write;
  std::vector<std::string> not_grantable;  // "exec /usr/bin/true: 1 attempt [the run]: ..."
  // What each not-grantable line is about, without its counts (they grow every round):
  // whether a round observed something new.
  std::vector<std::string> not_grantable_keys;
  std::vector<std::string> names_only;     // looked up, never connected to
  std::vector<std::string> notes;          // observed, neither proposed nor refused outright
  // Past the caps: how many more of each were left out of the lists above.
  uint64_t more_egress = 0, more_read = 0, more_write = 0, more_not_grantable = 0, more_names = 0, more_notes = 0;
  uint64_t observations_dropped = 0;  // past kMaxObservations or the runs' own event caps
  [[nodiscard]] bool empty_grants() const { return egress.empty() && fs_read.empty() && fs_write.empty(); }
  // One key per grant, to tell whether a round added anything.
  [[nodiscard]] std::vector<std::string> keys() const;
};

class Learner {
 public:
  // `used_by`: "example NAME", or "the run" (one run with --input / ARGS).
  void add(const Observation& o, const std::string& used_by, uint64_t count = 1);
  void add_dropped(uint64_t n) { dropped_ += n; }
  // The entries `m` lacks for what was observed.
  [[nodiscard]] Proposal propose(const manifest::Manifest& m) const;
  [[nodiscard]] size_t size() const { return order_.size(); }

 private:
  struct Seen {
    Observation o;
    std::string used_by;
    uint64_t count = 0;
  };
  std::map<std::string, size_t> index_;
  std::vector<Seen> order_;
  uint64_t dropped_ = 0;
};

// Adds the proposal's grants to `m` (what the next learn round runs with); egress only
// when `network` (--allow-network).
void apply_proposal(manifest::Manifest& m, const Proposal& p, bool network);

// "{host: api.example.com, port: 443, protocol: https}"
std::string egress_yaml(const manifest::EgressEntry& e);

}  // namespace soyaos::policy
