// `soyaos pack push|pull|list|inspect|unflag` (SPEC.md T3, T4, C8(4)): the Moon's registry,
// through the daemon when one answers, else embedded with state under $SOYAOS_HOME
// (docs/moon.md, moon/backend.h).
// Exit 0 success (also "already pushed"), 1 refused or failed, 2 usage error (including a
// malformed NAME@VERSION). Results on stdout, errors on stderr.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "cli/remote_packs.h"
#include "common/text.h"
#include "manifest/manifest.h"
#include "moon/backend.h"
#include "oci/reference.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

Result<std::unique_ptr<moon::MoonBackend>> open_registry() {
  auto home = moon::default_home();
  if (!home) return home.error();
  return moon::open_moon(*home);
}

int fail(const char* cmd, const Error& e) {
  print_error(std::string("pack ") + cmd, e);
  return 1;
}

// Parses NAME@VERSION or prints why not; nullopt means exit 2.
std::optional<moon::PackRef> ref_or_usage(const char* cmd, const std::string& text) {
  std::string why;
  auto ref = moon::parse_ref(text, why);
  if (!ref) print_error(std::string("pack ") + cmd, why);
  return ref;
}

// "fs read /etc/shadow (openat: ENOENT)" for a capability_violation event; else its JSON.
std::string violation_summary(const std::string& text) {
  const json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return text;
  const json& d = v.contains("data") && v["data"].is_object() ? v["data"] : v;
  if (!d.is_object() || !d.contains("resource")) return v.dump();
  auto s = [&](const char* k) { return d.contains(k) && d[k].is_string() ? d[k].get<std::string>() : std::string(); };
  std::string out = s("surface");
  if (!s("access").empty()) out += " " + s("access");
  out += " " + s("resource");
  if (!s("syscall").empty()) out += " (" + s("syscall") + (s("errno").empty() ? "" : ": " + s("errno")) + ")";
  return out;
}

int run_push(const std::string& dir, const CliContext& ctx) {
  auto reg = open_registry();
  if (!reg) return fail("push", reg.error());
  auto r = (*reg)->push(dir, moon::current_actor());
  if (!r) return fail("push", r.error());
  switch (r->outcome) {
    case moon::PushOutcome::invalid:
      for (const auto& d : r->diagnostics) std::fprintf(stderr, "%s\n", d.c_str());
      std::fprintf(stderr, "soyaos pack push: refused: the manifest is invalid\n");
      return 1;
    case moon::PushOutcome::lint_errors:
      std::fputs(r->findings_text.c_str(), stderr);
      std::fprintf(stderr, "soyaos pack push: refused: lint errors (see soyaos pack lint)\n");
      return 1;
    case moon::PushOutcome::conflict:
      std::fprintf(stderr,
                   "soyaos pack push: refused: %s@%s is already in the registry with different content "
                   "(stored %s, this pack %s); bump the version\n",
                   r->pack.name.c_str(), r->pack.version.c_str(), r->pack.digest.c_str(), r->attempted_digest.c_str());
      return 1;
    case moon::PushOutcome::already_pushed:
    case moon::PushOutcome::pushed:
      break;
  }
  if (!r->findings_text.empty()) std::fputs(r->findings_text.c_str(), stderr);
  std::printf("%s  %s@%s  %s\n", moon::to_string(r->outcome), r->pack.name.c_str(), r->pack.version.c_str(),
              r->pack.digest.c_str());
  (void)ctx;
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_pull(const std::string& ref_text, std::string out) {
  if (oci::looks_remote(ref_text)) return remote_pull(ref_text, out, false);
  auto ref = ref_or_usage("pull", ref_text);
  if (!ref) return kExitUsage;
  if (out.empty()) out = ref->name;
  auto reg = open_registry();
  if (!reg) return fail("pull", reg.error());
  auto p = (*reg)->pull(*ref, out);
  if (!p) return fail("pull", p.error());
  std::printf("pulled  %s  %s  -> %s\n", ref->str().c_str(), p->digest.c_str(), out.c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_list(const std::string& format) {
  auto reg = open_registry();
  if (!reg) return fail("list", reg.error());
  auto packs = (*reg)->list();
  if (!packs) return fail("list", packs.error());
  json arr = json::array();
  for (const auto& p : *packs) {
    auto flag = (*reg)->active_flag(p.name, p.version, p.tree_digest);
    if (!flag) return fail("list", flag.error());
    const bool flagged = flag->has_value();
    if (format == "json") {
      arr.push_back({{"name", p.name}, {"version", p.version}, {"digest", p.digest}, {"tree_digest", p.tree_digest},
                     {"size", p.size}, {"pushed_at", p.pushed_at}, {"flagged", flagged}, {"remote", false}});
    } else {
      std::printf("%s@%s  %s%s\n", escape_for_terminal(p.name).c_str(), escape_for_terminal(p.version).c_str(),
                  p.digest.c_str(), flagged ? "  [flagged]" : "");
    }
  }
  // The registry packs this home pulled (or pushed), after the local ones (C12).
  auto home = moon::default_home();
  if (!home) return fail("list", home.error());
  auto remote = remote_list(*home);
  if (!remote) return fail("list", remote.error());
  for (auto& e : *remote) {
    if (format == "json") {
      e["remote"] = true;
      arr.push_back(std::move(e));
      continue;
    }
    // REF  sha256:MANIFEST  NAME@VERSION  consent: from a registry, escaped (E7).
    const std::string pack = e.contains("error") ? "error: " + e["error"].get<std::string>()
                                                 : e["name"].get<std::string>() + "@" + e["version"].get<std::string>() +
                                                       "  " + e["consent"].get<std::string>();
    const std::string digest = e["digest"].get<std::string>();
    std::printf("%s  %s  %s\n", escape_for_terminal(e["reference"].get<std::string>()).c_str(),
                digest.empty() ? "-" : escape_for_terminal(digest).c_str(), escape_for_terminal(pack).c_str());
  }
  if (format == "json") std::printf("%s\n", arr.dump(2).c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// C11/M7/M8 at a glance: the secrets the pack declares (names and hosts: a pack never holds
// a value) and the http rules of its egress entries. Empty objects when the stored
// manifest does not parse (it was valid when pushed).
json secrets_summary(const std::string& manifest_text) {
  json secrets = json::array(), rules = json::array();
  auto parsed = manifest::parse_manifest(manifest_text, "soyapack.yaml");
  if (parsed.manifest) {
    for (const auto& d : parsed.manifest->secrets) secrets.push_back({{"name", d.name}, {"hosts", d.hosts}});
    for (const auto& e : parsed.manifest->capabilities.egress) {
      if (e.http.empty()) continue;
      json list = json::array();
      for (const auto& r : e.http) list.push_back({{"method", r.method}, {"path", r.path}});
      rules.push_back({{"entry", e.key_path},
                       {"host", e.host},
                       {"port", e.port},
                       {"protocol", manifest::to_string(e.protocol)},
                       {"rules", std::move(list)}});
    }
  }
  return {{"secrets", std::move(secrets)}, {"http_rules", std::move(rules)}};
}

int run_inspect(const std::string& ref_text, const std::string& format) {
  if (oci::looks_remote(ref_text)) return remote_inspect(ref_text, format);
  auto ref = ref_or_usage("inspect", ref_text);
  if (!ref) return kExitUsage;
  auto reg = open_registry();
  if (!reg) return fail("inspect", reg.error());
  auto p = (*reg)->get(*ref);
  if (!p) return fail("inspect", p.error());
  // Flags of this version, and those a directory run raised on the same content (digest).
  auto flags = (*reg)->flags(ref->name, ref->version, p->tree_digest);
  if (!flags) return fail("inspect", flags.error());
  bool flagged = false;
  for (const auto& f : *flags) flagged = flagged || f.active;
  const json summary = secrets_summary(p->manifest);
  auto consent = inspect_consent(**reg, p->oci_manifest, format == "json");  // C12: signatures, approvals
  if (!consent) return fail("inspect", consent.error());
  if (format == "json") {
    json fl = json::array();
    for (const auto& f : *flags) {
      json v = json::parse(f.violation, nullptr, false);
      json cleared_by = f.cleared ? moon::actor_to_json(f.cleared_by) : json(nullptr);
      fl.push_back({{"run_id", f.run_id},
                    {"pack", f.name + "@" + f.version},
                    {"digest", f.digest.empty() ? json(nullptr) : json(f.digest)},
                    {"flagged_at", f.flagged_at},
                    {"active", f.active},
                    {"cleared", f.cleared},
                    {"cleared_at", f.cleared ? json(f.cleared_at) : json(nullptr)},
                    {"cleared_by", std::move(cleared_by)},
                    {"cleared_reason", f.cleared ? json(f.cleared_reason) : json(nullptr)},
                    {"origin", f.origin.empty() ? json(nullptr) : json(valid_utf8(f.origin))},
                    {"violation", v.is_discarded() ? json(f.violation) : v}});
    }
    auto manifest = moon::yaml_to_json(p->manifest);
    json doc = {{"name", p->name},
                {"version", p->version},
                {"digest", p->digest},
                {"tree_digest", p->tree_digest},
                {"oci_manifest", p->oci_manifest},
                {"size", p->size},
                {"pushed_at", p->pushed_at},
                {"flagged", flagged},
                {"flags", std::move(fl)},
                {"secrets", summary["secrets"]},
                {"http_rules", summary["http_rules"]},
                {"signatures", json::parse(*consent)["signatures"]},
                {"approvals", json::parse(*consent)["approvals"]},
                {"manifest", manifest ? *manifest : json(nullptr)},
                {"manifest_text", p->manifest}};
    std::printf("%s\n", doc.dump(2).c_str());
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  // Names, the manifest and the flags' violations come from a pack author or an agent:
  // escaped (E7), so that no escape sequence in them reaches the terminal.
  std::printf("name:         %s\n", escape_for_terminal(p->name).c_str());
  std::printf("version:      %s\n", escape_for_terminal(p->version).c_str());
  std::printf("digest:       %s\n", p->digest.c_str());
  std::printf("tree digest:  %s\n", p->tree_digest.c_str());
  std::printf("size:         %lld bytes\n", static_cast<long long>(p->size));
  std::printf("pushed:       %s\n", p->pushed_at.c_str());
  std::printf("flagged:      %s\n", flagged ? "yes" : "no");
  if (!flags->empty()) {
    std::printf("flags:\n");
    for (const auto& f : *flags) {
      std::string state = "active";
      if (f.cleared) {
        state = "cleared " + f.cleared_at + " by " +
                (f.cleared_by.user.empty() ? "uid " + std::to_string(f.cleared_by.uid) : f.cleared_by.user) +
                ": " + f.cleared_reason;
      }
      std::string as;  // raised under another NAME@VERSION (a directory run of the same content)
      if (f.name != p->name || f.version != p->version) as = "  (as " + f.name + "@" + f.version + ")";
      if (!f.origin.empty()) as += "  " + escape_for_terminal(f.origin);  // read from a registry (C12)
      std::printf("  %s  run %s%s  [%s]  %s\n", f.flagged_at.c_str(), f.run_id.c_str(), as.c_str(), state.c_str(),
                  escape_for_terminal(violation_summary(f.violation)).c_str());
    }
  }
  // Secrets: names and the hosts their values may go to; values are never in a pack.
  if (!summary["secrets"].empty()) {
    std::printf("secrets:\n");
    for (const auto& d : summary["secrets"]) {
      std::string hosts;
      for (const auto& h : d["hosts"]) hosts += (hosts.empty() ? "" : ", ") + h.get<std::string>();
      std::printf("  %s  -> %s\n", escape_for_terminal(d["name"].get<std::string>()).c_str(),
                  escape_for_terminal(hosts).c_str());
    }
  }
  if (!summary["http_rules"].empty()) {
    std::printf("http rules:\n");
    for (const auto& e : summary["http_rules"]) {
      std::string rules;
      for (const auto& r : e["rules"]) {
        rules += (rules.empty() ? "" : ", ") + r["method"].get<std::string>() + " " + r["path"].get<std::string>();
      }
      std::printf("  %s  %s:%d/%s  %s\n", e["entry"].get<std::string>().c_str(),
                  escape_for_terminal(e["host"].get<std::string>()).c_str(), e["port"].get<int>(),
                  e["protocol"].get<std::string>().c_str(), escape_for_terminal(rules).c_str());
    }
  }
  std::fputs(consent->c_str(), stdout);
  std::printf("manifest:\n");
  std::string line;
  for (char c : p->manifest) {
    if (c == '\n') {
      std::printf("  %s\n", escape_for_terminal(line).c_str());
      line.clear();
    } else {
      line += c;
    }
  }
  if (!line.empty()) std::printf("  %s\n", escape_for_terminal(line).c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_unflag(const std::string& ref_text, const std::string& reason) {
  auto ref = ref_or_usage("unflag", ref_text);
  if (!ref) return kExitUsage;
  if (reason.find_first_not_of(" \t\r\n") == std::string::npos) {
    std::fprintf(stderr, "soyaos pack unflag: --reason TEXT is required (why the flag may be cleared)\n");
    return kExitUsage;
  }
  auto reg = open_registry();
  if (!reg) return fail("unflag", reg.error());
  auto n = (*reg)->unflag(ref->name, ref->version, reason, moon::current_actor());
  if (!n) return fail("unflag", n.error());
  if (*n == 0) {
    // A directory run may have flagged a NAME@VERSION never pushed: known when it has flags.
    auto all = (*reg)->flags(ref->name, ref->version, "");
    if (!all) return fail("unflag", all.error());
    if (all->empty()) {
      auto p = (*reg)->get(*ref);
      if (!p) return fail("unflag", p.error());
    }
    std::printf("not flagged  %s\n", ref->str().c_str());
  } else {
    std::printf("unflagged  %s  (%d flag%s cleared)\n", ref->str().c_str(), *n, *n == 1 ? "" : "s");
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

void register_pack_registry(Command pack, CliContext& ctx) {
  {
    auto dir = std::make_shared<std::string>(".");
    auto ref = std::make_shared<std::string>();
    auto source = std::make_shared<std::string>();
    auto cmd = pack.add_subcommand(
        "push", "Validate, lint and store a pack in the Moon's registry, or push it to an OCI registry (REF)");
    cmd.add_option("DIR", *dir, "Pack directory (default: the current directory)");
    cmd.add_option("REF", *ref, "REGISTRY[:PORT]/REPO[:TAG]: push to an OCI registry instead (docs/registry.md)");
    cmd.add_option("--source", *source, "URL of the pack's source (annotation org.opencontainers.image.source)");
    cmd.callback([dir, ref, source, &ctx] {
      // `pack push REF` (one argument, not a directory, a registry reference): DIR is ".".
      std::error_code ec;
      if (ref->empty() && oci::looks_remote(*dir) && !std::filesystem::is_directory(*dir, ec)) std::swap(*dir, *ref);
      if (ref->empty()) {
        ctx.exit_code = run_push(dir->empty() ? "." : *dir, ctx);
      } else {
        ctx.exit_code = remote_push(dir->empty() ? "." : *dir, *ref, *source);
      }
    });
  }
  {
    auto ref = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto approve = std::make_shared<bool>(false);
    auto cmd = pack.add_subcommand(
        "pull", "Extract NAME@VERSION from the Moon's registry, or pull REGISTRY/REPO[:TAG|@DIGEST] (verified)");
    cmd.add_option("REF", *ref, "NAME@VERSION, or REGISTRY[:PORT]/REPO[:TAG|@sha256:HEX]").required();
    cmd.add_flag("--approve", *approve, "Approve this version's capabilities (registry packs)");
    cmd.add_option("-o,--output", *out, "Directory to create (default: ./NAME); must not exist or be empty");
    cmd.callback([ref, out, approve, &ctx] {
      ctx.exit_code = oci::looks_remote(*ref) ? remote_pull(*ref, *out, *approve) : run_pull(*ref, *out);
    });
  }
  {
    auto format = std::make_shared<std::string>("text");
    auto cmd = pack.add_subcommand("list", "List the packs in the registry");
    cmd.add_option("--format", *format, "Output format: text (default) or json")
        .check_member({"text", "json"});
    cmd.callback([format, &ctx] { ctx.exit_code = run_list(*format); });
  }
  {
    auto ref = std::make_shared<std::string>();
    auto format = std::make_shared<std::string>("text");
    auto cmd = pack.add_subcommand("inspect", "Show a pushed pack (manifest, digest, flags) or a registry pack's "
                                               "capabilities without downloading it");
    cmd.add_option("REF", *ref, "NAME@VERSION, or REGISTRY[:PORT]/REPO[:TAG|@sha256:HEX]").required();
    cmd.add_option("--format", *format, "Output format: text (default) or json")
        .check_member({"text", "json"});
    cmd.callback([ref, format, &ctx] { ctx.exit_code = run_inspect(*ref, *format); });
  }
  {
    auto ref = std::make_shared<std::string>();
    auto reason = std::make_shared<std::string>();
    auto cmd = pack.add_subcommand("unflag", "Clear the flags a violation raised on NAME@VERSION (recorded as an event)");
    cmd.add_option("REF", *ref, "NAME@VERSION").required();
    // Required, checked in run_unflag (after the reference) so the error names the command.
    cmd.add_option("--reason", *reason, "Why the flag may be cleared (required; stored in the pack_unflagged event)");
    cmd.callback([ref, reason, &ctx] { ctx.exit_code = run_unflag(*ref, *reason); });
  }
}

}  // namespace soyaos::cli
