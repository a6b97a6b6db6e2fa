// Who ran what under which policy (SPEC.md E5): the parts of run_started and run_finished
// that let a responder answer that from the record alone. docs/events.md lists each field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "manifest/manifest.h"
#include "policy/operator_network.h"
#include "policy/policy.h"
#include "supervisor/supervisor.h"

namespace soyaos::supervisor {

// This process's real user: {"uid": N, "name": "alice"} (name null when the uid has none).
nlohmann::ordered_json run_user();

// The capabilities in force: the manifest's (egress entries as "HOST:PORT/PROTOCOL" or
// "*", the fs paths the agent may read and write as compiled, the tier), the resources
// (every limit, defaults applied) and the operator's --mount options.
nlohmann::ordered_json capabilities_in_force(const manifest::Manifest& m, const policy::Policy& policy,
                                             const std::vector<std::string>& mounts);

// The operator's network policy from the Moon configuration (C6a), as it applied.
nlohmann::ordered_json operator_policy(const policy::OperatorNetwork& network);

// Each --input in order: {"name" (null when unnamed), "path" (in the sandbox),
// "host_path", "digest" (common/content_digest.h input_digest())}. An input that cannot be
// read now is an error (the run does not start).
Result<nlohmann::ordered_json> inputs_record(const std::vector<policy::InputSpec>& inputs);

// run_finished's output digests: "stdout" / "stderr" {digest, bytes}, and the
// /workdir/out tree digest when it was collected (`tree_digest`, null otherwise).
nlohmann::ordered_json output_digests(const OutputCapture& captured, bool out_collected, const std::string& out_dir,
                                      std::string& error);

}  // namespace soyaos::supervisor
