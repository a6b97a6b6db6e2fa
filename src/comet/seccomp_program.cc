// build_agent_filter(): the agent's seccomp program as compiled at build time by
// soyaos_seccomp_gen (src/comet/gen/seccomp_gen.cc) from the table in seccomp_filter.cc.
#include <linux/filter.h>

#include <iterator>

#include "comet/seccomp_filter.h"

namespace soyaos::comet {
namespace {
#include "agent_filter_bpf.inc"  // kAgentFilterObserved, kAgentFilterUnobserved (generated)
}  // namespace

Result<SeccompProgram> build_agent_filter(bool observe_paths) {
  SeccompProgram program;
  if (observe_paths) {
    program.instructions.assign(std::begin(kAgentFilterObserved), std::end(kAgentFilterObserved));
  } else {
    program.instructions.assign(std::begin(kAgentFilterUnobserved), std::end(kAgentFilterUnobserved));
  }
  return program;
}

}  // namespace soyaos::comet
