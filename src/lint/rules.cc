// The lint rule table: the one place a rule is described. `--explain`, the SARIF
// `rules[]` and the rules section of docs/lint-rules.md are all rendered from it (a unit
// test keeps the document in step). Ids are stable: never renumber, only add.
#include <algorithm>
#include <array>
#include <cctype>

#include "lint/lint.h"

namespace soyaos::lint {
namespace {

constexpr std::array<RuleInfo, 17> kRules = {{
    {"SP100", "manifest-invalid", Severity::error, false,
     "The manifest does not validate (SPEC.md M1-M6), so nothing else can be checked.",
     "Lint reasons about a typed manifest; a manifest that `soyaos pack validate` rejects has no "
     "well-defined capabilities to compare. Each validation error is reported under this id in json and "
     "sarif output (text output prints them as `pack validate` does, on stderr).",
     "Fix the errors `soyaos pack validate DIR` prints (each names file:line:column and the key path), "
     "then lint again.",
     "capabilities:\n  egress:\n    - host: api.example.com\n      port: 99999\n"
     "# soyapack.yaml:4:13: error: capabilities.egress[0].port: ..."},
    {"SP101", "egress-undeclared", Severity::error, false,
     "A tool's URL needs an egress entry (host, port, protocol) that capabilities.egress does not declare.",
     "The Comet denies every connection no egress entry allows (C6): the tool will fail at run time "
     "with ECONNREFUSED and the run will be flagged as a capability violation. Host, port and protocol "
     "must all match; the port defaults from the URL's scheme (https 443, http 80; wss/ws map to "
     "https/http).",
     "Add an egress entry with the tool's host, port and protocol (or a `*.suffix` wildcard covering "
     "it), or change the tool's url to a destination the pack declares.",
     "tools:\n  fetch: {kind: builtin.http_get, url: https://api.example.com/v1}\ncapabilities:\n  egress: []\n"
     "# err   tools.fetch uses `api.example.com:443/https` but no capabilities.egress entry allows it"},
    {"SP102", "egress-mismatch", Severity::error, false,
     "A tool's URL is not covered while a declared egress entry is used by no tool: most likely one of "
     "the two is a typo, reported as one pair.",
     "Reporting the uncovered tool (SP101) and the unused entry (SP105) separately hides the likely "
     "cause: the entry was meant for that tool. The pair is reported once and neither half is reported "
     "again by another rule. The protocol is shown on both sides only when it is what differs.",
     "Make the entry and the tool's url agree: correct the host, port or protocol of the entry, or the "
     "tool's url, whichever is wrong.",
     "tools:\n  fetch: {kind: builtin.http_get, url: https://api.anthropic.com/v1/messages}\n"
     "capabilities:\n  egress:\n    - {host: api.openai.com, port: 443, protocol: https}\n"
     "# err   capabilities.egress declares `api.openai.com:443` but tools.fetch uses `api.anthropic.com:443`"},
    {"SP103", "fs-undeclared", Severity::error, false,
     "A filesystem tool's path is not under any fs.read (for builtin.fs_read) or fs.write (for "
     "builtin.fs_write) prefix.",
     "The Comet only shows declared paths (C2): reading an undeclared path fails with ENOENT and "
     "writing outside fs.write with EACCES, both capability violations. /workdir is always readable "
     "(M5); a path under an fs.write prefix is readable too. Prefixes match whole path components: "
     "/workdir/out covers /workdir/out/a.json, not /workdir/outbox.",
     "Declare a prefix covering the tool's path in capabilities.fs.read or capabilities.fs.write, or "
     "move the tool's path under a declared one.",
     "tools:\n  save: {kind: builtin.fs_write, path: /workdir/outbox/r.md}\ncapabilities:\n  fs: {write: []}\n"
     "# err   tools.save writes `/workdir/outbox/r.md` but no capabilities.fs.write prefix covers it"},
    {"SP104", "fs-mismatch", Severity::error, false,
     "A filesystem tool's path is not covered while a declared non-standard fs path of the same list "
     "is used by no tool: reported as one pair.",
     "As for SP102: an uncovered path next to an unused prefix is most likely one mistake. Pairs are "
     "made within one list (fs.read with builtin.fs_read tools, fs.write with builtin.fs_write tools), "
     "never with the standard paths /workdir, /workdir/inputs and /workdir/out (which are never "
     "reported as unused either), and neither half is reported again by another rule.",
     "Make the declared prefix and the tool's path agree.",
     "tools:\n  load: {kind: builtin.fs_read, path: /datasets/a.csv}\n"
     "capabilities:\n  fs: {read: [/workdir, /dataset]}\n"
     "# err   capabilities.fs.read declares `/dataset` but tools.load uses `/datasets/a.csv`"},
    {"SP105", "egress-unused", Severity::warning, false,
     "A declared egress entry is used by no tool.",
     "Every entry widens what the agent's code can reach, whether or not a tool needs it. An entry no "
     "tool uses is either dead (remove it) or used directly by the agent's code, which a reviewer "
     "cannot see from the manifest. An entry with protocol moon-proxy is used when a tool's http(s) "
     "url is covered by no direct entry.",
     "Remove the entry, or declare the tool that uses it.",
     "capabilities:\n  egress:\n    - {host: api.example.com, port: 443, protocol: https}\n"
     "# warn  capabilities.egress[0] declares `api.example.com:443/https` but no tool uses it"},
    {"SP106", "fs-unused", Severity::warning, false,
     "A declared fs path other than /workdir, /workdir/inputs, /workdir/out and private scratch is used by "
     "no tool.",
     "Non-standard paths are extra mounts (tmpfs or operator data, C2); one no tool uses widens the "
     "agent's view for nothing. The standard paths are exempt: they are the pack, its input and its "
     "output; so are private scratch paths in fs.write (M6: /tmp, /home/agent, outside /workdir and the "
     "runtime layer), the Comet's own tmpfs, empty at start and discarded at exit, which reach nothing "
     "of the host's.",
     "Remove the path, or declare the builtin.fs_read / builtin.fs_write tool that uses it.",
     "capabilities:\n  fs: {read: [/data]}\n"
     "# warn  capabilities.fs.read[0] declares `/data` but no tool uses it"},
    {"SP107", "read-only-side-effect-tool", Severity::error, false,
     "A tool with a side effect is declared in a read-only pack.",
     "read-only results are cached by input hash and replayed without running the agent (C10), so a "
     "side effect would silently not happen again (M6). Side effects (M3): builtin.http_post/put/patch/"
     "delete, builtin.fs_write outside /workdir/out, custom tools with side_effect: true.",
     "Declare determinism_tier: side-effect, or remove the tool (or write under /workdir/out).",
     "tools:\n  notify: {kind: builtin.http_post, url: https://hooks.example.com/x}\n"
     "capabilities:\n  determinism_tier: read-only\n"
     "# err   tools.notify (builtin.http_post) has a side effect but determinism_tier is read-only"},
    {"SP108", "read-only-write-outside-out", Severity::error, false,
     "A read-only pack declares an fs.write path outside /workdir/out that is not private scratch.",
     "A read-only pack's only effect must be its output directory, which the cache replays (C10, M6). "
     "Writes elsewhere would not be replayed on a cache hit. Private scratch paths outside /workdir "
     "(/tmp, /home/agent: the Comet's own tmpfs, discarded at exit) are not effects and are allowed.",
     "Write under /workdir/out or to a scratch path outside /workdir, or declare determinism_tier: "
     "side-effect.",
     "capabilities:\n  fs: {write: [/workdir/out, /workdir/cache]}\n  determinism_tier: read-only\n"
     "# err   capabilities.fs.write[1] allows writing `/workdir/cache` outside /workdir/out but determinism_tier "
     "is read-only"},
    {"SP110", "wildcard-host", Severity::error, true,
     "(--strict) An egress entry uses a wildcard host (`*.suffix`), or egress is \"*\".",
     "A wildcard allows every name below the suffix, including ones an attacker can register or that "
     "a compromised agent can use to exfiltrate data (`SECRET.attacker.example.com` style names are "
     "not possible against an exact name). Least privilege names exact hosts.",
     "List the exact hosts the tools use instead of the wildcard.",
     "capabilities:\n  egress:\n    - {host: \"*.example.com\", port: 443, protocol: https}\n"
     "# err   capabilities.egress[0] uses the wildcard host `*.example.com`"},
    {"SP111", "ip-literal-host", Severity::warning, true,
     "(--strict) An egress entry names an IP literal instead of a DNS name.",
     "An address says nothing to a reviewer, skips the Moon's DNS allowlist and its logging, and "
     "https to an address cannot be checked against a server name (SNI).",
     "Use the DNS name of the service (add it to the Moon's dns.hosts if it has none).",
     "capabilities:\n  egress:\n    - {host: 10.0.0.7, port: 8080, protocol: http}\n"
     "# warn  capabilities.egress[0] uses the IP literal `10.0.0.7` instead of a DNS name"},
    {"SP112", "egress-not-exercised", Severity::error, true,
     "(--strict) A declared egress entry is exercised by no example (through the tools it lists).",
     "`soyaos pack test` runs the examples; a capability no example exercises is untested, and a "
     "reviewer has no run showing why it is needed.",
     "Add the tool that uses the entry to an example's `tools:` list (add an example if needed), or "
     "remove the entry.",
     "tools:\n  fetch: {kind: builtin.http_get, url: https://api.example.com/}\n"
     "examples:\n  - {name: basic, tools: []}\n"
     "# err   capabilities.egress[0] declares `api.example.com:443/https` but no example exercises it"},
    {"SP113", "fs-not-exercised", Severity::error, true,
     "(--strict) A declared fs path other than /workdir, /workdir/inputs, /workdir/out and private "
     "scratch (SP106) is exercised by no example (through the tools it lists).",
     "As SP112, for filesystem capabilities.",
     "List the tool that reads or writes the path in an example's `tools:`, or remove the path.",
     "capabilities:\n  fs: {read: [/data]}\n"
     "# err   capabilities.fs.read[0] declares `/data` but no example exercises it"},
    {"SP114", "tier-looser-than-needed", Severity::warning, true,
     "(--strict) determinism_tier is looser than the tools need.",
     "The tier a pack needs: unrestricted with egress \"*\"; else side-effect with a side-effect tool "
     "or an fs.write path outside /workdir/out that is not private scratch; else read-only (builtin.llm has no side effect, M3). A looser tier "
     "gives up caching (C10) and tells reviewers to expect effects that are not there.",
     "Declare the tier named in the finding.",
     "tools:\n  fetch: {kind: builtin.http_get, url: https://api.example.com/}\n"
     "capabilities:\n  determinism_tier: side-effect\n"
     "# warn  determinism_tier is side-effect but no tool has a side effect: read-only is enough"},
    {"SP115", "tier-determinism-mismatch", Severity::error, true,
     "(--strict) determinism_tier is stricter than the tools need.",
     "A read-only pack is cached and replayed (C10) and may not have effects (M6); a tier stricter "
     "than what its tools do is a promise the pack cannot keep. Validation refuses most such packs; "
     "under --strict the mismatch is also reported on the tier itself.",
     "Declare the tier named in the finding, or remove the tool or path that needs it.",
     "tools:\n  post: {kind: builtin.http_post, url: https://hooks.example.com/x}\n"
     "capabilities:\n  determinism_tier: read-only\n"
     "# err   determinism_tier is read-only but the pack needs side-effect"},
    {"SP120", "secret-host-uncovered", Severity::error, false,
     "A secret is bound to a host that no https or http egress entry covers.",
     "A secret's real value is only ever sent by the egress gateway, which substitutes it for the "
     "agent's placeholder in requests it can read: those of an https or http entry for that host (C11). "
     "Without such an entry the agent cannot reach the host at all, or reaches it only through a tcp "
     "entry or the Moon proxy, where nothing is substituted: the secret is useless there and the binding "
     "is most likely a typo.",
     "Add an https (or http) egress entry for the host, or correct the host in `secrets.NAME.hosts`.",
     "secrets:\n  API_KEY: {hosts: [api.example.com]}\ncapabilities:\n  egress:\n"
     "    - {host: api.example.org, port: 443, protocol: https}\n"
     "# err   secrets.API_KEY is bound to `api.example.com` but no https or http capabilities.egress entry "
     "covers it"},
    {"SP121", "credential-literal", Severity::error, false,
     "A value in agent.env, agent.args, an example's args or a tool's url looks like a credential.",
     "A pack is pushed, pulled, cached and shown by `pack inspect` in plain text: a key written into it is "
     "published with it (M7), and the agent holds the real value in its memory. Recognised: known key "
     "prefixes at a word boundary with a long enough tail (sk-, sk-ant-, ghp_, gho_, ghu_, ghs_, ghr_, "
     "github_pat_, xoxb-/xoxp-/xoxa-/xoxr-/xoxs-, glpat-, AIza, AKIA/ASIA, hf_, npm_), PEM private keys "
     "(-----BEGIN ... PRIVATE KEY-----), JSON Web Tokens (eyJ...), URLs with a password "
     "(scheme://user:password@host), and high-entropy tokens: at least 20 characters of [A-Za-z0-9+/_=-] "
     "with letters and digits, at least 4.0 bits of Shannon entropy per character, and at least 30% of "
     "adjacent letter/digit pairs changing class (upper, lower, digit), which model names and dated "
     "versions (claude-3-5-sonnet-20241022, Mixtral-8x7B-Instruct) do not reach. Hex strings (digests, "
     "UUIDs) stay below 4.0 bits. The finding names the kind, never the value. `pack push` refuses a pack "
     "with this error.",
     "Declare the credential under `secrets:` with the hosts it is for, read it from the environment "
     "variable of that name in the agent, and supply the value at run time (`--secret NAME` or "
     "`soyaos secret set NAME`). Rotate a key that was already pushed.",
     "agent:\n  env: {ANTHROPIC_API_KEY: sk-ant-api03-AbCdEf0123456789AbCdEf}\n"
     "# err   agent.env.ANTHROPIC_API_KEY holds what looks like an Anthropic API key (sk-ant-...); declare it "
     "under secrets: instead"},
}};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::span<const RuleInfo> rules() { return kRules; }

int rule_index(std::string_view id) {
  for (std::size_t i = 0; i < kRules.size(); ++i) {
    if (iequals(kRules[i].id, id)) return static_cast<int>(i);
  }
  return -1;
}

const RuleInfo* find_rule(std::string_view id) {
  int i = rule_index(id);
  return i < 0 ? nullptr : &kRules[static_cast<std::size_t>(i)];
}

}  // namespace soyaos::lint
