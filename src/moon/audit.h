// What `soyaos moon check` and `soyaos scope verify` say about the Scope record (SPEC.md
// E6): the hash chain, the signed checkpoints and the head file (Store::verify_chain), and
// the result cache against the record — every cache entry must be the result of the run
// it credits, as that run's run_finished recorded it, and every cache_hit must replay such
// an entry. One problem a line, naming the seq, the run, the entry.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "moon/store.h"

namespace soyaos::moon {

struct AuditOptions {
  std::optional<std::string> run_id;    // scope verify --run: this run only
  const chain::MoonKey* key = nullptr;  // a pinned public key (--key), else HOME/moon.pub
};

struct AuditReport {
  std::vector<std::string> problems;
  Store::ChainReport chain;
  int64_t cache_entries = 0;  // entries checked against the record
};

Result<AuditReport> audit_record(Store& store, const std::filesystem::path& home, const AuditOptions& options);

struct CacheEntryAudit;
class MoonBackend;
// Why cache entry `e` is not the result of the run it credits, "" when it is: the index
// and the manifest credit the same run, and `fin` — that run's run_finished as the record
// holds it (nullopt: the record has none) — records the entry's pack, digest, exit code,
// key and output digests. What `moon check` names for every entry, and what `soyaos run`
// checks before replaying one (a forged entry is never replayed).
std::string cache_entry_problem(const CacheEntryAudit& e, const std::optional<StoredEvent>& fin);
// The same check, reading the run's run_finished from `moon` (embedded or the daemon).
Result<std::string> verify_cache_entry(MoonBackend& moon, const CacheEntryAudit& e);

}  // namespace soyaos::moon
