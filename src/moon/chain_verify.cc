// Store::verify_chain (SPEC.md E6): recomputes the hash chain of the Scope events and checks
// the signed checkpoints and the head file against it. Every finding names the seq (and
// the run and type of the row) or the checkpoint, and what it means: an edit (content or
// time no longer matches the hash), a deletion (a seq gap), an insertion or a rewrite (a
// link that does not fit), a truncated tail (a checkpoint or the head file beyond the
// store's end), a forged checkpoint (a bad signature or another key).
#include <sqlite3.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "moon/chain.h"
#include "moon/sqlite_util.h"
#include "moon/store.h"

namespace soyaos::moon {
namespace {

using detail::Stmt;
namespace fs = std::filesystem;

Result<Stmt> prepare(sqlite3* db, const fs::path& path, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK)
    return make_error("verify the Scope chain (" + path.string() + "): " + sqlite3_errmsg(db));
  return Stmt(s);
}

Error step_error(sqlite3* db, const fs::path& path) {
  return make_error("verify the Scope chain (" + path.string() + "): " + sqlite3_errmsg(db));
}

std::string str_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

struct Row {
  int64_t seq = 0;
  std::string time, type, run, pack, version, json, prev, hash;
};

// "seq 17 (capability_violation, run 01M…)": what a finding is about.
std::string label(const Row& r) {
  std::string out = "seq " + std::to_string(r.seq) + " (" + (r.type.empty() ? "no type" : r.type);
  if (!r.run.empty()) out += ", run " + r.run;
  return out + ")";
}

std::string range(int64_t from, int64_t to) {
  return from == to ? "seq " + std::to_string(from) : "seq " + std::to_string(from) + ".." + std::to_string(to);
}

// The columns `scope query` filters on must say what the hashed JSON says.
void check_columns(const Row& r, std::vector<std::string>& problems) {
  const auto j = nlohmann::json::parse(r.json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    problems.push_back(label(r) + ": the stored event is not a JSON object");
    return;
  }
  const nlohmann::json empty;
  const nlohmann::json& data = j.contains("data") ? j["data"] : empty;
  const std::pair<const char*, std::pair<std::string, std::string>> cols[] = {
      {"time", {r.time, str_field(j, "time")}},
      {"type", {r.type, str_field(j, "type")}},
      {"run_id", {r.run, str_field(data, "run_id")}},
      {"pack", {r.pack, str_field(data, "pack")}},
      {"version", {r.version, str_field(data, "version")}}};
  for (const auto& [name, v] : cols) {
    if (v.first != v.second) {
      problems.push_back(label(r) + ": edited: the " + name + " column says '" + v.first + "', the event says '" +
                         v.second + "'" + (std::string(name) == "time" ? " (backdated?)" : ""));
    }
  }
}

}  // namespace

Result<Store::ChainReport> Store::verify_chain(const ChainCheck& check) {
  ChainReport report;
  const fs::path home = path_.parent_path();
  auto& problems = report.problems;

  // The key to verify with: pinned, else moon.pub.
  std::optional<chain::MoonKey> own_key;
  const chain::MoonKey* key = check.key;
  if (key == nullptr) {
    auto k = chain::MoonKey::load_public(home);
    if (!k) {
      problems.push_back((home / "moon.pub").string() + ": " + k.error().describe());
    } else if (*k) {
      own_key = std::move(**k);
      key = &*own_key;
    }
  }
  if (key != nullptr) report.key_id = key->id();

  {
    auto meta = prepare(db_, path_, "SELECT value FROM chain_meta WHERE name='chained_at_upgrade_through'");
    if (!meta) return meta.error();
    if (meta->step() == SQLITE_ROW) report.chained_at_upgrade = std::stoll("0" + meta->text(0));
  }
  auto last = prepare(db_, path_, "SELECT COALESCE(MAX(seq), 0) FROM events");
  if (!last) return last.error();
  if (last->step() != SQLITE_ROW) return step_error(db_, path_);
  report.last_seq = last->integer(0);

  // The segment to walk: the whole chain, or the run's events from the one before its
  // first (the link into it) to the checkpoint covering its last.
  int64_t lo = 1, hi = report.last_seq;
  int64_t run_last = 0;
  bool covered = true;  // a run's last event is under a checkpoint
  if (check.run_id) {
    auto span = prepare(db_, path_, "SELECT MIN(seq), MAX(seq), COUNT(*) FROM events WHERE run_id=?1");
    if (!span) return span.error();
    span->bind(1, *check.run_id);
    if (span->step() != SQLITE_ROW) return step_error(db_, path_);
    if (span->integer(2) == 0) {
      problems.push_back("run " + *check.run_id + ": no events of this run in the record");
      return report;
    }
    lo = std::max<int64_t>(1, span->integer(0) - 1);
    run_last = span->integer(1);
    auto cover = prepare(db_, path_, "SELECT MIN(seq) FROM checkpoints WHERE seq >= ?1");
    if (!cover) return cover.error();
    cover->bind(1, run_last);
    // MIN() of nothing is NULL, read as 0.
    if (cover->step() == SQLITE_ROW && cover->integer(0) > 0) {
      hi = cover->integer(0);
    } else {
      hi = report.last_seq;
      covered = false;
    }
  }

  // ---- the chain ----
  auto rows = prepare(db_, path_,
                      "SELECT seq, time, type, COALESCE(run_id,''), COALESCE(pack,''), COALESCE(version,''), json, "
                      "COALESCE(prev_hash,''), COALESCE(hash,'') FROM events WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq");
  if (!rows) return rows.error();
  rows->bind(1, lo).bind(2, hi);
  std::optional<Row> before;  // the previous row walked
  int rc = 0;
  while ((rc = rows->step()) == SQLITE_ROW) {
    Row r{rows->integer(0), rows->text(1), rows->text(2), rows->text(3), rows->text(4),
          rows->text(5),    rows->text(6), rows->text(7), rows->text(8)};
    ++report.events;
    const bool upgraded = r.seq <= report.chained_at_upgrade;
    if (r.hash.empty()) {
      problems.push_back(label(r) + ": not chained: stored outside soyaos (inserted)");
    } else {
      if (chain::event_hash(r.seq, r.prev, r.json) != r.hash)
        problems.push_back(label(r) + ": edited: its content no longer matches its hash (changed, backdated or moved)");
      check_columns(r, problems);
    }
    if (before) {
      if (r.seq != before->seq + 1 && !upgraded)
        problems.push_back(range(before->seq + 1, r.seq - 1) + ": deleted: missing between seq " +
                           std::to_string(before->seq) + " and seq " + std::to_string(r.seq));
      // After a gap the deletion is the finding; a link that does not fit without one is
      // an insertion, a replacement or a rehashed edit.
      if (r.seq == before->seq + 1 && !r.hash.empty() && !before->hash.empty() && r.prev != before->hash)
        problems.push_back(label(r) + ": does not link to seq " + std::to_string(before->seq) +
                           ": a row was inserted, replaced or rehashed here");
    } else if (lo == 1 && !r.hash.empty()) {
      if (r.seq != 1 && !upgraded) problems.push_back(range(1, r.seq - 1) + ": deleted: the record starts at " + label(r));
      if (r.prev != chain::kGenesisHash && r.seq == 1)
        problems.push_back(label(r) + ": does not start the chain: a row was inserted or replaced here");
    }
    before = std::move(r);
  }
  if (rc != SQLITE_DONE) return step_error(db_, path_);

  // ---- the checkpoints ----
  auto cps = prepare(db_, path_,
                     "SELECT c.id, c.seq, c.hash, c.time, c.key_id, c.signature, COALESCE(e.hash, ''), e.seq IS NOT NULL "
                     "FROM checkpoints c LEFT JOIN events e ON e.seq = c.seq WHERE c.seq >= ?1 AND c.seq <= ?2 "
                     "ORDER BY c.id");
  if (!cps) return cps.error();
  // Whole-store: every checkpoint, so one beyond the end (a cut tail) is seen.
  cps->bind(1, check.run_id ? lo : 0).bind(2, check.run_id ? hi : INT64_MAX);
  int64_t last_cp = 0;
  while ((rc = cps->step()) == SQLITE_ROW) {
    ++report.checkpoints;
    chain::Checkpoint cp{cps->integer(1), cps->text(2), cps->text(3), cps->text(4), cps->text(5)};
    const std::string name = "checkpoint " + std::to_string(cps->integer(0)) + " (seq " + std::to_string(cp.seq) + ")";
    last_cp = std::max(last_cp, cp.seq);
    if (key == nullptr) {
      problems.push_back(name + ": cannot be verified: " + (home / "moon.pub").string() + " is missing");
    } else if (cp.key_id != key->id()) {
      problems.push_back(name + ": signed by key " + cp.key_id + ", not by this Moon's key " + key->id() +
                         " (forged or from another Moon)");
    } else if (!key->verify(cp)) {
      problems.push_back(name + ": bad signature: forged or edited");
    }
    if (cps->integer(7) == 0) {
      problems.push_back(name + ": the event it covers is gone: " +
                         (cp.seq > report.last_seq ? "the record was truncated after seq " + std::to_string(report.last_seq)
                                                   : std::string("deleted")));
    } else if (cps->text(6) != cp.hash) {
      problems.push_back(name + ": the chain no longer ends in the signed hash at seq " + std::to_string(cp.seq) +
                         ": the events up to it were rewritten");
    }
  }
  if (rc != SQLITE_DONE) return step_error(db_, path_);
  // Every committed batch ends with a checkpoint: events past the last one were not
  // stored by a Moon. (For a run: its events past the checkpoint that should cover them.)
  if (check.run_id) {
    if (!covered && run_last > report.chained_at_upgrade)
      problems.push_back("run " + *check.run_id + ": its events up to seq " + std::to_string(run_last) +
                         " are after the last checkpoint: not stored by a Moon (inserted)");
  } else if (report.last_seq > std::max(last_cp, report.chained_at_upgrade)) {
    problems.push_back(range(std::max(last_cp, report.chained_at_upgrade) + 1, report.last_seq) +
                       ": after the last checkpoint (seq " + std::to_string(last_cp) +
                       "): not stored by a Moon (inserted)");
  }

  // ---- the sequence counter and the head file: a cut tail ----
  auto counter = prepare(db_, path_, "SELECT seq FROM sqlite_sequence WHERE name='events'");
  if (!counter) return counter.error();
  if (counter->step() == SQLITE_ROW && counter->integer(0) > report.last_seq) {
    problems.push_back(range(report.last_seq + 1, counter->integer(0)) + ": deleted: the store's sequence counter is at " +
                       std::to_string(counter->integer(0)) + " but the record ends at seq " +
                       std::to_string(report.last_seq) + " (truncated)");
  }
  const std::string head_file = chain::head_path(home).string();
  auto head = chain::read_head(home);
  if (!head) {
    problems.push_back(head_file + ": " + head.error().describe());
  } else if (!*head) {
    if (report.checkpoints > 0 || report.last_seq > 0) problems.push_back(head_file + ": missing (deleted?)");
  } else {
    const chain::Checkpoint& h = **head;
    if (key != nullptr && (h.key_id != key->id() || !key->verify(h))) {
      problems.push_back(head_file + ": bad signature: forged or edited");
    } else if (h.seq > report.last_seq) {
      problems.push_back(range(report.last_seq + 1, h.seq) + ": deleted: " + head_file + " records seq " +
                         std::to_string(h.seq) + " but the record ends at seq " + std::to_string(report.last_seq) +
                         " (truncated)");
    } else {
      auto at = prepare(db_, path_, "SELECT COALESCE(hash, '') FROM events WHERE seq=?1");
      if (!at) return at.error();
      at->bind(1, h.seq);
      const int hrc = at->step();
      if (hrc == SQLITE_DONE) {
        problems.push_back(head_file + ": seq " + std::to_string(h.seq) + " it records is missing (deleted)");
      } else if (hrc == SQLITE_ROW && at->text(0) != h.hash) {
        problems.push_back(head_file + ": the chain no longer ends in the signed hash at seq " + std::to_string(h.seq) +
                           ": the events up to it were rewritten");
      }
    }
  }
  return report;
}

}  // namespace soyaos::moon
