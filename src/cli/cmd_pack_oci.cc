// `soyaos pack push [DIR] REF`, `pack pull REF`, `pack inspect REF`, `login`, `logout`, and
// the pack directory behind `run REF` (SPEC.md C12; docs/registry.md). Exit codes as the
// local commands: 0 success, 1 refused or failed, 2 usage error (a malformed reference).
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/print_error.h"
#include "cli/remote_flags.h"
#include "cli/remote_gate.h"
#include "cli/remote_packs.h"
#include "common/digest.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "lint/report.h"
#include "moon/backend.h"
#include "oci/client.h"
#include "oci/credentials.h"
#include "oci/pack.h"
#include "oci/reference.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

int fail(const char* cmd, const std::string& what) {
  print_error(cmd, what);
  return 1;
}

std::optional<oci::Reference> ref_or_usage(const char* cmd, const std::string& text) {
  std::string why;
  auto ref = oci::parse_reference(text, why);
  if (!ref) std::fprintf(stderr, "soyaos %s: %s: %s\n", cmd, escape_for_terminal(text).c_str(), why.c_str());
  return ref;
}

Result<oci::Client> client_for(const fs::path& home, const std::string& registry) {
  auto opts = oci::options_for(home, registry);
  if (!opts) return opts.error();
  return oci::Client::open(registry, std::move(*opts));
}

std::string s(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

// "N blobs uploaded, M already there, K mounted"
std::string stats_text(const oci::TransferStats& st) {
  std::string out = std::to_string(st.blobs_uploaded) + " uploaded (" + std::to_string(st.bytes_uploaded) + " bytes";
  if (st.chunks > 0) out += " in " + std::to_string(st.chunks) + " chunks";
  out += "), " + std::to_string(st.blobs_present) + " already there, " + std::to_string(st.blobs_mounted) + " mounted";
  return out;
}

bool print_gate(const GateDecision& d) {
  for (const auto& n : d.notes) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
  if (d.exit_code != 0 && !d.message.empty()) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(d.message).c_str());
  return d.exit_code == 0;
}

// The list of a manifest JSON's egress entries as "host:port/protocol".
std::vector<std::string> egress_of(const json& m) {
  std::vector<std::string> out;
  if (!m.contains("capabilities") || !m["capabilities"].is_object()) return out;
  const json& c = m["capabilities"];
  if (!c.contains("egress")) return out;
  if (c["egress"].is_string()) {
    out.push_back(c["egress"].get<std::string>());
    return out;
  }
  if (!c["egress"].is_array()) return out;
  for (const auto& e : c["egress"]) {
    if (!e.is_object()) continue;
    std::string port = e.contains("port") ? (e["port"].is_string() ? e["port"].get<std::string>() : e["port"].dump()) : "?";
    std::string line = s(e, "host") + ":" + port + "/" + s(e, "protocol");
    if (e.contains("http") && e["http"].is_array()) {
      std::string rules;
      for (const auto& r : e["http"]) rules += (rules.empty() ? "" : ", ") + s(r, "method") + " " + s(r, "path");
      line += "  [" + rules + "]";
    }
    out.push_back(line);
  }
  return out;
}

std::string joined(const json& arr) {
  std::string out;
  if (!arr.is_array()) return out;
  for (const auto& v : arr) out += (out.empty() ? "" : ", ") + (v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

}  // namespace

int remote_push(const std::string& dir, const std::string& ref_text, const std::string& source) {
  auto ref = ref_or_usage("pack push", ref_text);
  if (!ref) return kExitUsage;
  auto home = moon::default_home();
  if (!home) return fail("pack push", home.error().describe());
  auto client = client_for(*home, ref->registry);
  if (!client) return fail("pack push", client.error().describe());
  auto r = oci::push_pack(*client, *home, dir, *ref, source);
  if (!r) return fail("pack push", r.error().describe());
  using O = oci::PushReport::Outcome;
  if (r->outcome == O::invalid) {
    for (const auto& d : r->diagnostics) std::fprintf(stderr, "%s\n", d.format().c_str());
    std::fprintf(stderr, "soyaos pack push: refused: the manifest is invalid\n");
    return 1;
  }
  if (r->outcome == O::lint_errors) {
    std::fputs(lint::format_text(r->findings).c_str(), stderr);
    std::fprintf(stderr, "soyaos pack push: refused: lint errors (see soyaos pack lint)\n");
    return 1;
  }
  if (!r->findings.empty()) std::fputs(lint::format_text(r->findings).c_str(), stderr);
  const auto& p = r->pack;
  std::printf("pushed  %s  %s\n", ref->str().c_str(), p.manifest_digest.c_str());
  std::printf("  pack     %s@%s  archive %s  (%llu bytes)\n", p.name.c_str(), escape_for_terminal(p.version).c_str(),
              p.layer.digest.c_str(), static_cast<unsigned long long>(p.layer.size));
  std::printf("  blobs    %s\n", stats_text(client->stats()).c_str());
  // This command talked to the registry: the flags queued for it go now (remote_flags.h).
  PublishOptions publish;
  publish.registry = ref->registry;
  publish.client = &*client;
  for (const auto& n : publish_queued_flags(*home, publish)) {
    std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int remote_pull(const std::string& ref_text, const std::string& out_in, bool approve) {
  auto ref = ref_or_usage("pack pull", ref_text);
  if (!ref) return kExitUsage;
  auto home = moon::default_home();
  if (!home) return fail("pack pull", home.error().describe());
  auto client = client_for(*home, ref->registry);
  if (!client) return fail("pack pull", client.error().describe());
  auto pack = oci::resolve_pack(*client, *ref);
  if (!pack) return fail("pack pull", pack.error().describe());
  if (!print_gate(remote_pack_gate({*pack, &*client, GateUse::pull, approve, *home}))) return 1;
  oci::RemoteStore store(*home);
  UniqueFd layer;  // the layer as downloaded now, hashed as it arrived: not hashed again
  if (auto st = store.fetch(*client, *pack, &layer); !st) return fail("pack pull", st.error().describe());
  const std::string out = out_in.empty() ? pack->name : out_in;
  if (auto st = store.extract(*pack, out, layer.get()); !st) {
    return fail("pack pull", ref->str() + ": " + st.error().describe());
  }
  std::printf("pulled  %s  %s  -> %s\n", ref->str().c_str(), pack->manifest_digest.c_str(), out.c_str());
  std::printf("  pack     %s@%s  archive %s  (%llu bytes)\n", pack->name.c_str(),
              escape_for_terminal(pack->version).c_str(), pack->layer.digest.c_str(),
              static_cast<unsigned long long>(pack->layer.size));
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int remote_inspect(const std::string& ref_text, const std::string& format) {
  auto ref = ref_or_usage("pack inspect", ref_text);
  if (!ref) return kExitUsage;
  auto home = moon::default_home();
  if (!home) return fail("pack inspect", home.error().describe());
  auto client = client_for(*home, ref->registry);
  if (!client) return fail("pack inspect", client.error().describe());
  auto pack = oci::resolve_pack(*client, *ref);
  if (!pack) return fail("pack inspect", pack.error().describe());
  GateDecision gate = remote_pack_gate({*pack, &*client, GateUse::inspect, false, *home});
  for (const auto& n : gate.notes) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
  const json& m = pack->config_json["manifest"];
  const json caps = m.contains("capabilities") && m["capabilities"].is_object() ? m["capabilities"] : json::object();
  json secrets = json::array();
  if (m.contains("secrets") && m["secrets"].is_object()) {
    for (const auto& [name, d] : m["secrets"].items()) {
      secrets.push_back({{"name", name}, {"hosts", d.is_object() && d.contains("hosts") ? d["hosts"] : json::array()}});
    }
  }
  if (format == "json") {
    json doc = {{"reference", ref->str()},
                {"digest", pack->manifest_digest},
                {"name", pack->name},
                {"version", pack->version},
                {"archive_digest", pack->layer.digest},
                {"size", pack->layer.size},
                {"tree_digest", pack->tree_digest},
                {"config_digest", pack->config.digest},
                {"determinism_tier", caps.contains("determinism_tier") ? caps["determinism_tier"] : json(nullptr)},
                {"capabilities", caps},
                {"secrets", secrets},
                {"annotations", pack->annotations},
                {"flagged", std::any_of(gate.flags.begin(), gate.flags.end(),
                                        [](const json& f) { return f.value("active", false); })},
                {"flags", gate.flags},
                {"manifest", m}};
    std::printf("%s\n", doc.dump(2).c_str());
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  // Everything here comes from a registry: escaped (E7), no escape sequence reaches the terminal.
  auto line = [](const char* k, const std::string& v) { std::printf("%-14s%s\n", k, escape_for_terminal(v).c_str()); };
  line("reference:", ref->str());
  line("digest:", pack->manifest_digest);
  line("name:", pack->name);
  line("version:", pack->version);
  line("archive:", pack->layer.digest + "  (" + std::to_string(pack->layer.size) + " bytes)");
  line("tree digest:", pack->tree_digest);
  line("tier:", s(caps, "determinism_tier"));
  const auto egress = egress_of(m);
  if (egress.empty()) line("egress:", "none");
  else {
    std::printf("egress:\n");
    for (const auto& e : egress) std::printf("  %s\n", escape_for_terminal(e).c_str());
  }
  if (caps.contains("fs") && caps["fs"].is_object()) {
    line("fs read:", joined(caps["fs"].value("read", json::array())));
    line("fs write:", joined(caps["fs"].value("write", json::array())));
  }
  if (secrets.empty()) line("secrets:", "none");
  else {
    std::printf("secrets:\n");
    for (const auto& d : secrets) {
      std::printf("  %s  -> %s\n", escape_for_terminal(d["name"].get<std::string>()).c_str(),
                  escape_for_terminal(joined(d["hosts"])).c_str());
    }
  }
  for (const auto& l : gate.lines) std::printf("%s\n", escape_for_terminal(l).c_str());
  if (!pack->annotations.empty()) {
    std::printf("annotations:\n");
    for (const auto& [k, v] : pack->annotations.items()) {
      std::printf("  %s: %s\n", escape_for_terminal(k).c_str(),
                  escape_for_terminal(v.is_string() ? v.get<std::string>() : v.dump()).c_str());
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

RemoteDir remote_pack_dir(const fs::path& home, const std::string& text) {
  RemoteDir out;
  std::string why;
  auto ref = oci::parse_reference(text, why);
  if (!ref) {
    out.error = text + ": no such pack directory, and " + why;
    return out;
  }
  oci::RemoteStore store(home);
  auto local = store.lookup(*ref);
  if (!local) {
    out.error = local.error().describe();
    return out;
  }
  std::optional<oci::RemotePack> pack = std::move(*local);
  std::optional<oci::Client> client;
  if (!pack) {  // first use: pull it
    auto c = client_for(home, ref->registry);
    if (!c) {
      out.error = c.error().describe();
      return out;
    }
    client.emplace(std::move(*c));
    auto resolved = oci::resolve_pack(*client, *ref);
    if (!resolved) {
      out.error = resolved.error().describe();
      return out;
    }
    pack = std::move(*resolved);
  }
  GateDecision gate = remote_pack_gate({*pack, client ? &*client : nullptr, GateUse::run, false, home});
  for (const auto& n : gate.notes) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
  if (gate.exit_code != 0) {
    out.exit_code = gate.exit_code;
    out.error = gate.message;
    return out;
  }
  UniqueFd layer;  // set when the layer was downloaded now (verified as it arrived)
  if (client) {
    if (auto st = store.fetch(*client, *pack, &layer); !st) {
      out.error = st.error().describe();
      return out;
    }
    std::fprintf(stderr, "soyaos: pulled %s (%s)\n", ref->str().c_str(), pack->manifest_digest.c_str());
  }
  // The client (and any libcurl resolver thread) is gone before the Comet is cloned.
  client.reset();
  const fs::path dir = home / "run-cache" / pack->layer.digest.substr(7) / "pack";
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    auto digest = tree_digest(dir);
    if (digest && *digest == pack->tree_digest) {
      out.dir = dir;
      return out;
    }
    fs::remove_all(dir.parent_path(), ec);  // modified or partial: extract again
  }
  fs::create_directories(dir.parent_path(), ec);
  const fs::path staging = dir.parent_path() / ("staging-" + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  if (auto st = store.extract(*pack, staging, layer.get()); !st) {
    out.error = ref->str() + ": " + st.error().describe();
    return out;
  }
  fs::rename(staging, dir, ec);
  if (ec && !fs::exists(dir)) {
    out.error = "rename " + staging.string() + ": " + ec.message();
    return out;
  }
  fs::remove_all(staging, ec);
  out.dir = dir;
  return out;
}

Result<json> remote_list(const fs::path& home) {
  oci::RemoteStore store(home);
  json out = json::array();
  auto recorded = store.recorded();
  if (!recorded) {
    // The index itself is unreadable: one row that says so, after the Moon's own packs.
    out.push_back({{"reference", (home / "remote" / "refs.json").string()}, {"digest", ""},
                   {"error", recorded.error().describe()}});
    return out;
  }
  for (const auto& r : *recorded) {
    json e = {{"reference", r.reference}, {"digest", r.manifest_digest}};
    if (!r.error.empty()) {  // a damaged entry: named, the others still listed
      e["error"] = r.error;
      out.push_back(std::move(e));
      continue;
    }
    std::string why;
    auto ref = oci::parse_reference(r.reference, why);
    auto pack = ref ? store.lookup(*ref) : Result<std::optional<oci::RemotePack>>(make_error(why));
    if (!pack || !*pack) {
      e["error"] = pack ? "the local copy is incomplete (pull it again)" : pack.error().describe();
      out.push_back(std::move(e));
      continue;
    }
    const auto& p = **pack;
    e["name"] = p.name;
    e["version"] = p.version;
    e["archive_digest"] = p.layer.digest;
    e["tree_digest"] = p.tree_digest;
    e["recorded_at"] = r.at;
    auto consent = consent_summary(p, home);
    if (!consent) {
      e["error"] = "consent: " + consent.error().describe();
      out.push_back(std::move(e));
      continue;
    }
    e["approved"] = consent->approved;
    e["runs"] = consent->runs;
    e["signature"] = consent->signature;
    e["consent"] = consent->state;
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

// The password: one line from stdin, never argv; echo off when stdin is a terminal.
std::optional<std::string> read_password() {
  const bool tty = ::isatty(STDIN_FILENO) == 1;
  termios old {};
  if (tty) {
    std::fprintf(stderr, "Password: ");
    if (::tcgetattr(STDIN_FILENO, &old) == 0) {
      termios quiet = old;
      quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      (void)::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
  }
  std::string line;
  const bool got = static_cast<bool>(std::getline(std::cin, line));
  if (tty) {
    (void)::tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    std::fprintf(stderr, "\n");
  }
  if (!got && line.empty()) return std::nullopt;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// REGISTRY (HOST[:PORT]) checked with the reference grammar.
std::optional<std::string> registry_or_usage(const char* cmd, const std::string& text) {
  std::string why;
  auto ref = oci::parse_reference(text + "/x", why);
  if (!ref || text.find('/') != std::string::npos) {
    std::fprintf(stderr, "soyaos %s: %s: not a registry (HOST[:PORT])\n", cmd, escape_for_terminal(text).c_str());
    return std::nullopt;
  }
  return ref->registry;
}

int run_login(const std::string& reg_text, std::string user) {
  auto registry = registry_or_usage("login", reg_text);
  if (!registry) return kExitUsage;
  if (user.empty()) {
    std::fprintf(stderr, "soyaos login: --username USER is required (the password is read from stdin)\n");
    return kExitUsage;
  }
  auto password = read_password();
  if (!password || password->empty()) {
    std::fprintf(stderr, "soyaos login: no password on stdin\n");
    return kExitUsage;
  }
  auto home = moon::default_home();
  if (!home) return fail("login", home.error().describe());
  auto opts = oci::options_for(*home, *registry);
  if (!opts) return fail("login", opts.error().describe());
  opts->credentials = oci::Credentials{user, *password, ""};
  auto client = oci::Client::open(*registry, std::move(*opts));
  if (!client) return fail("login", client.error().describe());
  if (auto st = client->ping(); !st) return fail("login", "login to " + *registry + " failed: " + st.error().describe());
  auto where = oci::store_credentials(*registry, {user, *password, ""});
  if (!where) return fail("login", where.error().describe());
  std::printf("login succeeded  %s  (credentials in %s)\n", registry->c_str(), where->c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_logout(const std::string& reg_text) {
  auto registry = registry_or_usage("logout", reg_text);
  if (!registry) return kExitUsage;
  auto erased = oci::erase_credentials(*registry);
  if (!erased) return fail("logout", erased.error().describe());
  std::printf("%s  %s\n", *erased ? "logged out" : "not logged in", registry->c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

void register_login_commands(Command app, CliContext& ctx) {
  {
    auto reg = std::make_shared<std::string>();
    auto user = std::make_shared<std::string>();
    auto cmd = app.add_subcommand("login", "Store credentials for a registry (password read from stdin)");
    cmd.add_option("REGISTRY", *reg, "HOST[:PORT]").required();
    cmd.add_option("-u,--username", *user, "User name");
    auto stdin_flag = std::make_shared<bool>(false);
    cmd.add_flag("--password-stdin", *stdin_flag,
                 "Accepted for docker compatibility: the password is always read from stdin");
    cmd.callback([reg, user, stdin_flag, &ctx] { ctx.exit_code = run_login(*reg, *user); });
  }
  {
    auto reg = std::make_shared<std::string>();
    auto cmd = app.add_subcommand("logout", "Remove the stored credentials of a registry");
    cmd.add_option("REGISTRY", *reg, "HOST[:PORT]").required();
    cmd.callback([reg, &ctx] { ctx.exit_code = run_logout(*reg); });
  }
}

}  // namespace soyaos::cli
