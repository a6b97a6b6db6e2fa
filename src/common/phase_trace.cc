#include "common/phase_trace.h"

#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace soyaos {
namespace {

bool read_enabled() {
  const char* v = std::getenv("SOYAOS_TRACE_PHASES");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

uint64_t clock_ns(clockid_t clock) {
  struct timespec ts {};
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// Appends the decimal digits of v (no locale, no allocation); the caller leaves room.
void append_u64(char* buf, size_t* len, uint64_t v) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) buf[(*len)++] = digits[--n];
}

void write_phase(const char* name, uint64_t monotonic_ns, const uint64_t* cpu_ns,
                 const uint64_t* child_cpu_ns = nullptr) {
  constexpr size_t kNameMax = 64;  // the two numbers, spaces and newline fit in the rest
  char line[sizeof "soyaos-phase " + kNameMax + 72];
  size_t len = 0;
  for (const char* p = "soyaos-phase "; *p != '\0'; ++p) line[len++] = *p;
  for (size_t i = 0; name[i] != '\0' && i < kNameMax; ++i) line[len++] = name[i];
  line[len++] = ' ';
  append_u64(line, &len, monotonic_ns);
  line[len++] = ' ';
  if (cpu_ns != nullptr) {
    append_u64(line, &len, *cpu_ns);
  } else {
    line[len++] = '-';
  }
  if (child_cpu_ns != nullptr) {
    line[len++] = ' ';
    append_u64(line, &len, *child_cpu_ns);
  }
  line[len++] = '\n';
  // One write: lines from several threads do not interleave. Best effort (a closed
  // stderr loses the trace, nothing else).
  (void)!::write(STDERR_FILENO, line, len);
}

}  // namespace

bool phase_trace_enabled() {
  // A function-local static: read on first use (thread-safe), never by tools that do not trace.
  static const bool enabled = read_enabled();
  return enabled;
}

void trace_phase_at(const char* name, uint64_t monotonic_ns) {
  if (!phase_trace_enabled()) return;
  write_phase(name, monotonic_ns, nullptr);
}

void trace_child_phase(const char* name, uint64_t monotonic_ns, uint64_t child_cpu_ns) {
  if (!phase_trace_enabled()) return;
  write_phase(name, monotonic_ns, nullptr, &child_cpu_ns);
}

void trace_phase(const char* name) {
  if (!phase_trace_enabled()) return;
  const uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  write_phase(name, clock_ns(CLOCK_MONOTONIC), &cpu);
}

}  // namespace soyaos
