// `soyaos pack sign REF --key FILE`, `soyaos pack diff A B`, `soyaos pack approve REF` (SPEC.md C12,
// docs/registry.md "Signatures and trust", docs/cli.md).
//
// sign: a minisign signature (common/minisign.h) of the pack's OCI image manifest, the
// bytes whose sha256 is the pack's manifest digest; for a local NAME@VERSION it is kept in
// the Moon (and written to -o FILE), so `minisign -V -m HOME/oci/blobs/sha256/HEX`
// verifies it. Exit 0 signed, 1 failed, 2 usage. Signatures and approvals go to the Moon
// through its backend: a daemon's (which records its peer as who) when one serves.
//
// For a registry REF the signature is pushed as a referrer of the image manifest
// (artifactType application/vnd.soyaos.pack.signature.v0) and kept in the Moon too.
//
// diff: what B may do that A may not, and the reverse (policy/capability_diff.h). A and B
// are pack directories, local NAME@VERSION or registry references (config blob only). Exit 0; with --exit-code, 1 when B is wider
// than A (the question a review gate asks); 2 usage or an unreadable pack.
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/hidden_input.h"
#include "cli/print_error.h"
#include "cli/remote_gate.h"
#include "common/digest.h"
#include "common/minisign.h"
#include "common/secret_bytes.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "manifest/diagnostic_text.h"
#include "manifest/manifest.h"
#include "moon/backend.h"
#include "moon/consent.h"
#include "moon/registry.h"
#include "oci/client.h"
#include "oci/pack.h"
#include "oci/reference.h"
#include "policy/capability_diff.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// The environment variable a signing key's password may come from (CI); else stdin.
constexpr const char* kPasswordEnv = "SOYAOS_KEY_PASSWORD";

// The key file's text, read straight into wiped, unswappable pages (an unencrypted minisign
// key file is the key itself); at most SecretBytes::kMaxBytes (64 KiB).
Result<SecretBytes> read_key_file(const std::string& file) {
  // O_NONBLOCK: a FIFO given by mistake is refused below instead of blocking the open until
  // a writer comes (a regular file ignores the flag).
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return errno_error("open secret key " + file);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat secret key " + file);
  if (!S_ISREG(st.st_mode)) return make_error("secret key " + file + ": not a regular file");
  return SecretBytes::read_all(fd.get(), "secret key " + file);
}

// $SOYAOS_KEY_PASSWORD; else a line typed without echo on a terminal; else stdin to its
// end (read_hidden_stdin, as `secret set` reads a value).
Result<SecretBytes> read_password() {
  if (const char* env = std::getenv(kPasswordEnv); env != nullptr && *env != '\0') return SecretBytes::copy_of(env);
  return read_hidden_stdin("Password of the secret key: ");
}

Result<minisign::SecretKey> load_secret_key(const std::string& file) {
  auto text = read_key_file(file);
  if (!text) return text.error();
  auto parsed = minisign::parse_secret_key(text->view());
  if (!parsed) return make_error(file + ": " + parsed.error().message);
  if (!parsed->encrypted) return minisign::decrypt(*parsed, "");
  auto password = read_password();
  if (!password) return password.error();
  auto key = minisign::decrypt(*parsed, password->view());
  if (!key) return make_error(file + ": " + key.error().message);
  return key;
}

// A registry pack's manifest and config (no layer download), with a client for it.
struct Remote {
  oci::Client client;
  oci::RemotePack pack;
};
Result<Remote> resolve_remote(const fs::path& home, const std::string& text) {
  std::string why;
  auto ref = oci::parse_reference(text, why);
  if (!ref) return make_error(text + ": " + why);
  auto opts = oci::options_for(home, ref->registry);
  if (!opts) return opts.error();
  auto client = oci::Client::open(ref->registry, std::move(*opts));
  if (!client) return client.error();
  auto pack = oci::resolve_pack(*client, *ref);
  if (!pack) return pack.error();
  return Remote{std::move(*client), std::move(*pack)};
}

int sign_fail(const Error& e) {
  print_error("pack sign", e);
  return 1;
}

// Writes the .minisig to `out` (when given).
Status write_signature(const std::string& out, const std::string& text) {
  if (out.empty()) return {};
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return make_error("write " + out);
  return {};
}

// A registry pack: the signature of its image manifest is pushed as a referrer (and kept
// in the Moon, so this host's runs verify it offline).
int run_sign_remote(const std::string& ref_text, const std::string& key_file, const std::string& out) {
  auto home = moon::default_home();
  if (!home) return sign_fail(home.error());
  auto remote = resolve_remote(*home, ref_text);
  if (!remote) return sign_fail(remote.error());
  const auto& pack = remote->pack;
  auto key = load_secret_key(key_file);
  if (!key) return sign_fail(key.error());
  const std::string reference = pack.ref.str();
  auto text = minisign::sign(*key, pack.manifest_bytes, moon::signature_trusted_comment(reference, pack.manifest_digest),
                             "signature from soyaos pack sign");
  if (!text) return sign_fail(text.error());
  oci::Descriptor subject;
  subject.media_type = oci::kImageManifest;
  subject.digest = pack.manifest_digest;
  subject.size = pack.manifest_bytes.size();
  const std::string key_id = minisign::key_id_hex(key->key_id);
  auto pushed = remote->client.push_referrer(pack.ref.repository, subject, kSignatureArtifactType, *text,
                                             kSignatureMediaType, json{{"org.soyaos.signature.key_id", key_id}});
  if (!pushed) return sign_fail(pushed.error());
  auto backend = moon::open_moon(*home);  // the daemon's when one serves this home
  if (!backend) return sign_fail(backend.error());
  moon::SignatureRecord rec;
  rec.manifest_digest = pack.manifest_digest;
  rec.key_id = key_id;
  rec.signature = *text;
  rec.reference = reference;
  rec.by = moon::current_actor();
  json data = {{"reference", valid_utf8(reference)},
               {"manifest_digest", pack.manifest_digest},
               {"key_id", key_id},
               {"referrer", pushed->digest},
               {"actor", moon::actor_to_json(rec.by)}};
  auto added = (*backend)->add_signature(rec, moon::pack_event(moon::kSignedEvent, pack.name, pack.version,
                                                             pack.tree_digest, std::move(data)));
  if (!added) return sign_fail(added.error());
  if (auto st = write_signature(out, *text); !st) return sign_fail(st.error());
  std::printf("signed  %s  %s  key %s  (referrer %s)\n", escape_for_terminal(reference).c_str(),
              pack.manifest_digest.c_str(), key_id.c_str(), pushed->digest.c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_sign(const std::string& ref_text, const std::string& key_file, const std::string& out) {
  if (oci::looks_remote(ref_text)) return run_sign_remote(ref_text, key_file, out);
  std::string why;
  auto ref = moon::parse_ref(ref_text, why);
  if (!ref) {
    print_error("pack sign", why);
    return kExitUsage;
  }
  auto home = moon::default_home();
  if (!home) return sign_fail(home.error());
  auto reg = moon::open_moon(*home);  // the daemon's when one serves this home
  if (!reg) return sign_fail(reg.error());
  auto pack = (*reg)->get(*ref);
  if (!pack) return sign_fail(pack.error());
  // The OCI image manifest as stored, checked against its digest before it is signed.
  const std::string& digest = pack->oci_manifest;
  auto bytes = (*reg)->oci_manifest(digest);
  if (!bytes) return sign_fail(bytes.error());
  auto key = load_secret_key(key_file);
  if (!key) return sign_fail(key.error());
  auto text = minisign::sign(*key, *bytes, moon::signature_trusted_comment(ref->str(), digest),
                             "signature from soyaos pack sign");
  if (!text) return sign_fail(text.error());
  moon::SignatureRecord rec;
  rec.manifest_digest = digest;
  rec.key_id = minisign::key_id_hex(key->key_id);
  rec.signature = *text;
  rec.reference = ref->str();
  rec.by = moon::current_actor();
  json data = {{"reference", ref->str()},
               {"manifest_digest", digest},
               {"key_id", rec.key_id},
               {"actor", moon::actor_to_json(rec.by)}};
  auto added = (*reg)->add_signature(
      rec, moon::pack_event(moon::kSignedEvent, ref->name, ref->version, pack->tree_digest, std::move(data)));
  if (!added) return sign_fail(added.error());
  if (auto st = write_signature(out, *text); !st) return sign_fail(st.error());
  std::printf("signed  %s  %s  key %s\n", ref->str().c_str(), digest.c_str(), rec.key_id.c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// A side of a diff: a pack directory, or NAME@VERSION in the Moon.
struct Side {
  std::string label;
  manifest::Manifest manifest;
};

Result<Side> load_side(const std::string& text) {
  std::error_code ec;
  if (fs::is_directory(text, ec)) {
    auto loaded = manifest::load_pack(text);
    if (!loaded.manifest) {
      std::string first = loaded.errors.empty() ? "invalid manifest" : manifest::raw_text(loaded.errors.front());
      return make_error(text + ": " + first);
    }
    return Side{text, std::move(*loaded.manifest)};
  }
  auto home = moon::default_home();
  if (!home) return home.error();
  if (oci::looks_remote(text)) {
    // The manifest from the config blob: nothing is downloaded beyond it.
    auto remote = resolve_remote(*home, text);
    if (!remote) return remote.error();
    const std::string manifest_text =
        remote->pack.config_json.contains("manifest") ? remote->pack.config_json["manifest"].dump() : "";
    auto parsed = manifest::parse_manifest(manifest_text, text + ":soyapack.yaml");
    if (!parsed.manifest) return make_error(text + ": its manifest (config blob) does not parse");
    return Side{remote->pack.ref.str(), std::move(*parsed.manifest)};
  }
  std::string why;
  auto ref = moon::parse_ref(text, why);
  if (!ref) return make_error(text + ": neither a pack directory nor NAME@VERSION (" + why + ")");
  auto reg = moon::open_moon(*home);
  if (!reg) return reg.error();
  auto pack = (*reg)->get(*ref);
  if (!pack) return pack.error();
  auto parsed = manifest::parse_manifest(pack->manifest, ref->str() + ":soyapack.yaml");
  if (!parsed.manifest) return make_error(ref->str() + ": its stored manifest does not parse");
  return Side{ref->str(), std::move(*parsed.manifest)};
}

int run_diff(const std::string& a_text, const std::string& b_text, bool exit_code, const std::string& format) {
  auto a = load_side(a_text);
  if (!a) {
    print_error("pack diff", a.error());
    return kExitUsage;
  }
  auto b = load_side(b_text);
  if (!b) {
    print_error("pack diff", b.error());
    return kExitUsage;
  }
  const auto diff = policy::diff_capabilities(a->manifest, b->manifest);
  if (format == "json") {
    json doc = {{"a", valid_utf8(a->label)}, {"b", valid_utf8(b->label)}};
    const json body = moon::diff_json(diff);
    for (const auto& [k, v] : body.items()) doc[k] = v;
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("--- %s\n+++ %s\n%s", escape_for_terminal(a->label).c_str(), escape_for_terminal(b->label).c_str(),
                policy::format_diff_text(diff).c_str());
  }
  if (std::fflush(stdout) != 0) return 1;
  return exit_code && diff.wider() ? 1 : 0;
}

int run_approve(const std::string& ref_text) {
  if (!oci::looks_remote(ref_text)) {
    std::fprintf(stderr,
                 "soyaos pack approve: %s: not a registry reference (REGISTRY/REPO[:TAG|@DIGEST]); packs pushed "
                 "from this machine need no approval\n",
                 escape_for_terminal(ref_text).c_str());
    return kExitUsage;
  }
  auto home = moon::default_home();
  if (!home) return sign_fail(home.error());
  auto remote = resolve_remote(*home, ref_text);
  if (!remote) {
    print_error("pack approve", remote.error());
    return 1;
  }
  const GateDecision d = approve_remote_pack(remote->pack, remote->client, *home);
  for (const auto& n : d.notes) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
  for (const auto& l : d.lines) std::printf("%s\n", escape_for_terminal(l).c_str());
  if (d.exit_code != 0) {
    std::fprintf(stderr, "soyaos pack approve: %s\n", escape_for_terminal(d.message).c_str());
    return d.exit_code;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

Result<std::string> inspect_consent(moon::MoonBackend& moon, const std::string& manifest_digest, bool as_json) {
  auto sigs = moon.signatures(manifest_digest);
  if (!sigs) return sigs.error();
  auto approvals = moon.approvals_of(manifest_digest);
  if (!approvals) return approvals.error();
  auto who = [](const moon::Actor& a) { return a.user.empty() ? "uid " + std::to_string(a.uid) : a.user; };
  if (as_json) {
    json s = json::array(), a = json::array();
    for (const auto& r : *sigs) {
      s.push_back({{"key_id", r.key_id},
                   {"reference", valid_utf8(r.reference)},
                   {"added_at", r.added_at},
                   {"by", moon::actor_to_json(r.by)},
                   {"signature", valid_utf8(r.signature)}});
    }
    for (const auto& r : *approvals) {
      a.push_back({{"repository", valid_utf8(r.repository)},
                   {"reference", valid_utf8(r.reference)},
                   {"approved_at", r.approved_at},
                   {"by", moon::actor_to_json(r.by)}});
    }
    return json{{"signatures", std::move(s)}, {"approvals", std::move(a)}}.dump();
  }
  std::string out;
  if (!sigs->empty()) {
    out += "signatures:\n";
    for (const auto& r : *sigs)
      out += "  " + escape_for_terminal(r.key_id) + "  " + escape_for_terminal(r.added_at) + "  by " + escape_for_terminal(who(r.by)) + "\n";
  }
  if (!approvals->empty()) {
    out += "approvals:\n";
    for (const auto& r : *approvals) {
      out += "  " + r.approved_at + "  by " + escape_for_terminal(who(r.by)) + "  " +
             escape_for_terminal(r.repository) + "\n";
    }
  }
  return out;
}

// approve: remote_gate.h approve_remote_pack(). Exit 0 approved, 1 refused or failed,
// 2 usage (a local reference).
void register_pack_sign(Command pack, CliContext& ctx) {
  {
    auto ref = std::make_shared<std::string>();
    auto key = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto cmd = pack.add_subcommand("sign", "Sign a pack's manifest digest with a minisign key (kept in the Moon)");
    cmd.add_option("REF", *ref, "NAME@VERSION, or REGISTRY/REPO[:TAG|@DIGEST] (pushed as a referrer)").required();
    cmd.add_option("--key", *key,
                   "minisign secret key file (minisign -G; its password from $SOYAOS_KEY_PASSWORD or stdin)")
        .required();
    cmd.add_option("-o,--output", *out, "Also write the signature (.minisig) to this file");
    cmd.callback([ref, key, out, &ctx] { ctx.exit_code = run_sign(*ref, *key, *out); });
  }
  {
    auto a = std::make_shared<std::string>();
    auto b = std::make_shared<std::string>();
    auto exit_code = std::make_shared<bool>(false);
    auto format = std::make_shared<std::string>("text");
    auto cmd = pack.add_subcommand("diff", "Show the capabilities B adds or removes relative to A");
    cmd.add_option("A", *a, "Pack directory, NAME@VERSION or REGISTRY/REPO[:TAG|@DIGEST]").required();
    cmd.add_option("B", *b, "Pack directory, NAME@VERSION or REGISTRY/REPO[:TAG|@DIGEST]").required();
    cmd.add_flag("--exit-code", *exit_code, "Exit 1 when B is wider than A (adds anything or raises a limit)");
    cmd.add_option("--format", *format, "Output format: text (default) or json")
        .check_member({"text", "json"});
    cmd.callback([a, b, exit_code, format, &ctx] { ctx.exit_code = run_diff(*a, *b, *exit_code, *format); });
  }
  {
    auto ref = std::make_shared<std::string>();
    auto cmd = pack.add_subcommand("approve", "Approve a registry pack's capabilities (shows the diff, recorded in the Moon)");
    cmd.add_option("REF", *ref, "REGISTRY/REPO[:TAG|@DIGEST]").required();
    cmd.callback([ref, &ctx] { ctx.exit_code = run_approve(*ref); });
  }
}

}  // namespace soyaos::cli
