// The supervisor's half of the runtime layer's served /proc files (policy/runtime_layer.h):
// reads the host's own file and the agent thread's CPU affinity, renders the agent's view
// and hands it over as a sealed, read-only memfd.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::supervisor {

// A read-only fd whose content is `path` (a served /proc file) as agent thread `tid` may see
// it: the CPUs of its affinity, memory bounded by the policy's limit.
Result<UniqueFd> open_served_file(const std::string& path, pid_t tid, const policy::Policy& policy);

}  // namespace soyaos::supervisor
