// `soyaos cache ls|stats|clear`: the result cache of read-only runs (SPEC.md C10,
// docs/tiers-and-cache.md).
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "common/text.h"
#include "moon/cache.h"
#include "moon/store.h"

namespace soyaos::cli {
namespace {

using json = nlohmann::ordered_json;

// Opens HOME/cache with the configured cap; prints the error and sets the exit status
// when it cannot.
std::optional<moon::ResultCache> open_cache(const char* cmd, CliContext& ctx) {
  auto home = moon::default_home();
  if (!home) {
    print_error(std::string("cache ") + cmd, home.error());
    ctx.exit_code = 1;
    return std::nullopt;
  }
  auto max = moon::ResultCache::configured_max();
  if (!max) {
    print_error(std::string("cache ") + cmd, max.error());
    ctx.exit_code = 1;
    return std::nullopt;
  }
  auto cache = moon::ResultCache::open(*home, *max);
  if (!cache) {
    print_error(std::string("cache ") + cmd, cache.error());
    ctx.exit_code = 1;
    return std::nullopt;
  }
  return std::move(cache.value());
}

// "1.5 MiB"-style sizes for people; json keeps bytes.
std::string human_size(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    (void)std::snprintf(buf, sizeof buf, "%" PRIu64 " B", n);
  } else {
    (void)std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

// RFC 3339 UTC, seconds, from Unix microseconds.
std::string utc_time(int64_t us) {
  std::time_t t = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  char buf[32];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return "?";
  return buf;
}

struct LsArgs {
  std::string format = "text";
  std::string pack;
};

void ls(const LsArgs& a, CliContext& ctx) {
  auto cache = open_cache("ls", ctx);
  if (!cache) return;
  auto entries = cache->entries(a.pack.empty() ? std::nullopt : std::optional<std::string>(a.pack));
  if (!entries) {
    print_error("cache ls", entries.error());
    ctx.exit_code = 1;
    return;
  }
  for (const auto& e : *entries) {
    if (a.format == "json") {
      json j = {{"key", e.key},           {"pack", e.pack},
                {"version", e.version},   {"run_id", e.run_id},
                {"provable", e.provable}, {"size", e.size},
                {"stored_at", e.stored_at}, {"last_used", utc_time(e.last_used_us)},
                {"hits", e.hits}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s  %-30s  %10s  last used %s  hits %" PRId64 "%s\n", e.key.substr(0, 12).c_str(),
                  escape_for_terminal(e.pack + "@" + e.version).c_str(), human_size(e.size).c_str(),
                  utc_time(e.last_used_us).c_str(),
                  e.hits, e.provable ? "" : "  (not provable)");
    }
  }
}

void stats(const std::string& format, CliContext& ctx) {
  auto cache = open_cache("stats", ctx);
  if (!cache) return;
  auto s = cache->stats();
  if (!s) {
    print_error("cache stats", s.error());
    ctx.exit_code = 1;
    return;
  }
  if (format == "json") {
    json j = {{"entries", s->entries}, {"bytes", s->bytes},   {"max_bytes", s->max_bytes},
              {"hits", s->hits},       {"misses", s->misses}, {"stores", s->stores},
              {"evictions", s->evictions}, {"corrupt", s->corrupt}, {"dir", cache->dir().string()}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("entries    %" PRId64 "\n", s->entries);
  std::printf("size       %s (%" PRIu64 " bytes) of %s (%" PRIu64 " bytes)\n", human_size(s->bytes).c_str(), s->bytes,
              human_size(s->max_bytes).c_str(), s->max_bytes);
  std::printf("hits       %" PRId64 "\n", s->hits);
  std::printf("misses     %" PRId64 "\n", s->misses);
  std::printf("stores     %" PRId64 "\n", s->stores);
  std::printf("evictions  %" PRId64 "\n", s->evictions);
  std::printf("corrupt    %" PRId64 "  (entries dropped: failed verification)\n", s->corrupt);
  std::printf("dir        %s\n", cache->dir().c_str());
}

void clear(const std::string& pack, CliContext& ctx) {
  auto cache = open_cache("clear", ctx);
  if (!cache) return;
  auto removed = cache->clear(pack.empty() ? std::nullopt : std::optional<std::string>(pack));
  if (!removed) {
    print_error("cache clear", removed.error());
    ctx.exit_code = 1;
    return;
  }
  std::printf("cleared  %" PRId64 " entr%s%s\n", *removed, *removed == 1 ? "y" : "ies",
              pack.empty() ? "" : (" of " + pack).c_str());
}

}  // namespace

void register_cache_commands(Command app, CliContext& ctx) {
  auto cache = app.add_subcommand("cache", "The result cache of read-only runs (ls, stats, clear)");
  cache.require_subcommand(1);

  auto ls_args = std::make_shared<LsArgs>();
  auto ls_cmd = cache.add_subcommand("ls", "One line per cached result, most recently used first");
  ls_cmd.add_option("--format", ls_args->format, "text or json (JSON Lines)")
      .check_member({"text", "json"});
  ls_cmd.add_option("--pack", ls_args->pack, "Only the results of this pack (manifest name)");
  ls_cmd.callback([ls_args, &ctx] { ls(*ls_args, ctx); });

  auto stats_format = std::make_shared<std::string>("text");
  auto stats_cmd = cache.add_subcommand("stats", "Entries, bytes, hits, misses, the size cap");
  stats_cmd.add_option("--format", *stats_format, "text or json").check_member({"text", "json"});
  stats_cmd.callback([stats_format, &ctx] { stats(*stats_format, ctx); });

  auto clear_pack = std::make_shared<std::string>();
  auto clear_cmd = cache.add_subcommand("clear", "Remove every cached result (or one pack's)");
  clear_cmd.add_option("--pack", *clear_pack, "Only the results of this pack (manifest name)");
  clear_cmd.callback([clear_pack, &ctx] { clear(*clear_pack, ctx); });
}

}  // namespace soyaos::cli
