// Durable event ingest into the Moon's store (bench/moon_bench.sh): appends N
// capability_violation-shaped events through moon::EventStore in batches, each batch one
// durable transaction (WAL, synchronous=FULL), and prints the rate.
// Usage: moon_ingest HOME N [BATCH=1000] [RUNS=N/1000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "moon/store.h"
#include "scope/events.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: moon_ingest HOME N [BATCH] [RUNS]\n");
    return 2;
  }
  const long n = std::strtol(argv[2], nullptr, 10);
  const long batch = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 1000;
  const long runs = argc > 4 ? std::strtol(argv[4], nullptr, 10) : std::max(1L, n / 1000);
  auto store = soyaos::moon::EventStore::open(argv[1]);
  if (!store) {
    std::fprintf(stderr, "moon_ingest: %s\n", store.error().describe().c_str());
    return 1;
  }
  static const char* kTypes[] = {"capability_violation", "dns_query", "egress_opened", "egress_closed"};
  std::vector<std::string> run_ids;
  for (long r = 0; r < runs; ++r) run_ids.push_back(soyaos::scope::new_run_id());
  // Events are built before the clock starts: the store is what is measured.
  std::vector<nlohmann::ordered_json> events;
  events.reserve(static_cast<size_t>(n));
  for (long i = 0; i < n; ++i) {
    soyaos::scope::RunContext ctx{"bench", run_ids[static_cast<size_t>(i % runs)], "pack" + std::to_string(i % 50),
                                  "1.0.0", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    events.push_back(soyaos::scope::make_event(
        ctx, kTypes[i % 4],
        {{"surface", "fs"}, {"resource", "/etc/shadow"}, {"syscall", "openat"}, {"errno", "ENOENT"},
         {"manifest_entry", "no match"}, {"pid", 1}, {"access", "read"}}));
  }
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; i += batch) {
    const long m = std::min(batch, n - i);
    if (auto s = store->append(std::span<const nlohmann::ordered_json>(events.data() + i, static_cast<size_t>(m))); !s) {
      std::fprintf(stderr, "moon_ingest: %s\n", s.error().describe().c_str());
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%ld events in %.3f s: %.0f events/s (batches of %ld, one durable transaction each)\n", n, secs,
              static_cast<double>(n) / secs, batch);
  std::printf("run_id %s\n", run_ids.front().c_str());
  return 0;
}
