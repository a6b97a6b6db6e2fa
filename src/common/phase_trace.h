// Phase timestamps for bench/startup.sh (issue #16): with SOYAOS_TRACE_PHASES=1 in the
// environment, trace_phase("name") writes one line
//     soyaos-phase NAME MONOTONIC_NS CPU_NS
// to stderr: CLOCK_MONOTONIC (the clock of the bench driver's time.monotonic_ns(), so the
// driver can name the milliseconds between its spawn and the first line, and between the
// last line and its wait), and the CPU time this process has used so far (every thread;
// "-" for a timestamp taken in the Comet's child), which the machine's load barely moves. Off by default: the environment is read once, and a disabled
// call is one load and a branch. Diagnostics only: nothing is decided on it.
#pragma once

#include <cstdint>

namespace soyaos {

// Whether SOYAOS_TRACE_PHASES=1 was set when the process first asked.
bool phase_trace_enabled();

// Writes the phase line (one write(2), async-signal-safe formatting) when enabled.
void trace_phase(const char* name);

// The same, with a timestamp taken elsewhere (the Comet's child measures its own steps).
void trace_phase_at(const char* name, uint64_t monotonic_ns);

// A step of the Comet's child: its timestamp and the child's own CPU time so far, as
//     soyaos-phase NAME MONOTONIC_NS - CHILD_CPU_NS
void trace_child_phase(const char* name, uint64_t monotonic_ns, uint64_t child_cpu_ns);

}  // namespace soyaos
