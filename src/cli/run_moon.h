// The glue between a run and the Moon (the daemon when one answers, else the embedded
// Moon of HOME: moon/backend.h open_moon()): the hooks that store the run's events
// (E3, E4) and keep the registry's violation flags (C8 (4)), and resolving NAME@VERSION
// to a verified pack directory for `soyaos run NAME@VERSION`. An error (including a
// SOYAOS_MOON_SOCKET daemon that does not answer) means the run does not start (125).
#pragma once

#include <filesystem>
#include <string>

#include "common/result.h"
#include "supervisor/run.h"

namespace soyaos::cli {

// Hooks for run_pack: before launch, warn (stderr, naming the newest unflagged version)
// and emit `pack_flagged` when this pack version or its content (digest) is flagged; every
// event goes to the Moon as it is emitted (moon/recorder.h: group-committed by a writer
// thread, run_started durable before the Comet starts); the run's first violation flags
// NAME@VERSION and the digest that ran at once (directory runs too; the Moon stores a
// `pack_flagged` event), flag first; finish() returns once the whole record is durable.
Result<supervisor::RunHooks> moon_run_hooks(const std::filesystem::path& home);

// Extracts NAME@VERSION from the registry into HOME/run-cache/<digest>/pack (once per
// digest; the tree digest is checked against the pushed record on every use, so a
// modified cache is re-extracted) and returns that directory.
Result<std::filesystem::path> pack_dir_for_ref(const std::filesystem::path& home, const std::string& ref);

}  // namespace soyaos::cli
