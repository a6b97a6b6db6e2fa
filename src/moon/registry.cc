#include "moon/registry.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/digest.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "manifest/rules.h"
#include "moon/archive.h"
#include "moon/unpack.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kRefAnnotation = "org.opencontainers.image.ref.name";
constexpr const char* kTreeAnnotation = "org.soyaos.pack.tree_digest";
constexpr const char* kTmpPrefix = ".tmp-";

fs::path oci_dir(const fs::path& home) { return home / "oci"; }
fs::path blob_dir(const fs::path& home) { return home / "oci" / "blobs" / "sha256"; }
fs::path blob_path(const fs::path& home, const std::string& digest) {
  return blob_dir(home) / digest.substr(digest.find(':') + 1);
}

std::string temp_name() { return kTmpPrefix + std::to_string(::getpid()) + "-" + scope::new_event_id().substr(0, 8); }

Status fsync_dir(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error("open " + dir.string());
  if (::fsync(fd.get()) != 0) return errno_error("fsync " + dir.string());
  return {};
}

Status write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write " + path.string());
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

// Writes `content` to dir/name atomically and durably: temp file in `dir`, fsync, rename,
// fsync the directory. With keep_existing, an existing dir/name is left as it is.
Status atomic_write(const fs::path& dir, const std::string& name, std::string_view content, bool keep_existing) {
  const fs::path target = dir / name;
  if (keep_existing && ::access(target.c_str(), F_OK) == 0) return {};
  const fs::path tmp = dir / temp_name();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create " + tmp.string());
  Status s = write_all(fd.get(), content, tmp);
  if (s && ::fsync(fd.get()) != 0) s = errno_error("fsync " + tmp.string());
  fd.reset();
  if (s && ::rename(tmp.c_str(), target.c_str()) != 0) s = errno_error("rename " + tmp.string() + " to " + target.string());
  if (!s) {
    (void)::unlink(tmp.c_str());
    return s;
  }
  return fsync_dir(dir);
}

// Stores `content` as a blob; returns its "sha256:HEX".
Result<std::string> put_blob(const fs::path& home, std::string_view content) {
  const std::string hex = sha256_hex(content);
  if (auto s = atomic_write(blob_dir(home), hex, content, true); !s) return s.error();
  return "sha256:" + hex;
}

// Removes temp files left by pushes that were killed (their process is gone).
void clean_stale_temps(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(kTmpPrefix, 0) != 0) continue;
    char* stop = nullptr;
    const long pid = std::strtol(n.c_str() + std::strlen(kTmpPrefix), &stop, 10);
    if (stop == nullptr || *stop != '-' || pid <= 0 || pid > INT32_MAX) continue;
    // kill(pid, 0): only asks whether the pushing process still exists.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) (void)::unlink(it->path().c_str());
  }
}

Status ensure_layout(const fs::path& home) {
  std::error_code ec;
  fs::create_directories(blob_dir(home), ec);
  if (ec) return make_error("create " + blob_dir(home).string(), ec.value());
  return atomic_write(oci_dir(home), "oci-layout", R"({"imageLayoutVersion":"1.0.0"})", true);
}

Result<std::string> read_small_file(const fs::path& p, size_t max) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + p.string());
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + p.string());
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max) return make_error("file too large: " + p.string());
  }
  return out;
}

// An exclusive lock on HOME/oci/.lock, released on destruction.
class LayoutLock {
 public:
  static Result<LayoutLock> take(const fs::path& home) {
    const fs::path p = oci_dir(home) / ".lock";
    UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd) return errno_error("open " + p.string());
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return errno_error("lock " + p.string());
    }
    return LayoutLock(std::move(fd));
  }

 private:
  explicit LayoutLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// Who changed the Moon's state, as events record it (docs/events.md): the user name is
// null when the uid has none.
json actor_json(const Actor& a) {
  return {{"uid", a.uid}, {"user", a.user.empty() ? json(nullptr) : json(valid_utf8(a.user))}};
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted: always a string
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s == "null" || s == "~" || s == "Null" || s == "NULL" || s.empty()) return nullptr;
  const bool neg = !s.empty() && (s[0] == '-' || s[0] == '+');
  if (s.size() > (neg ? 1U : 0U) && s.size() <= 18 &&
      std::all_of(s.begin() + (neg ? 1 : 0), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoll(s);
  return s;
}

json node_to_json(const YAML::Node& n, int depth) {
  if (depth > 64) return nullptr;
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = node_to_json(kv.second, depth + 1);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(node_to_json(v, depth + 1));
      return a;
    }
    case YAML::NodeType::Scalar:
      return scalar_to_json(n);
    default:
      return nullptr;
  }
}

}  // namespace

std::optional<PackRef> parse_ref(std::string_view text, std::string& why) {
  const auto at = text.find('@');
  if (at == std::string_view::npos) {
    why = "expected NAME@VERSION (e.g. issue-summarizer@1.4.2), got '" + std::string(text) + "'";
    return std::nullopt;
  }
  PackRef ref{std::string(text.substr(0, at)), std::string(text.substr(at + 1))};
  if (!manifest::detail::is_pack_name(ref.name)) {
    why = "invalid pack name '" + ref.name + "' in '" + std::string(text) +
          "' (lower-case letters, digits and '-', starting with a letter, at most 63)";
    return std::nullopt;
  }
  if (!manifest::detail::is_semver(ref.version)) {
    why = "invalid version '" + ref.version + "' in '" + std::string(text) + "' (semantic version, e.g. 1.4.2)";
    return std::nullopt;
  }
  return ref;
}

const char* to_string(PushOutcome o) {
  switch (o) {
    case PushOutcome::pushed: return "pushed";
    case PushOutcome::already_pushed: return "already pushed";
    case PushOutcome::conflict: return "conflict";
    case PushOutcome::invalid: return "invalid";
    case PushOutcome::lint_errors: return "lint errors";
  }
  return "?";
}

Result<json> yaml_to_json(const std::string& yaml_text) {
  try {
    return node_to_json(YAML::Load(yaml_text), 0);
  } catch (const std::exception& e) {
    return make_error(std::string("convert the manifest to JSON: ") + e.what());
  }
}

Result<Registry> Registry::open(const fs::path& home) {
  auto store = Store::open(home);
  if (!store) return store.error();
  if (auto s = ensure_layout(home); !s) return s.error();
  return Registry(home, std::move(store).value());
}

Result<PushResult> Registry::push(const fs::path& dir, const Actor& actor) {
  PushResult r;
  auto loaded = manifest::load_pack(dir);
  if (!loaded.manifest) {
    r.outcome = PushOutcome::invalid;
    r.diagnostics = std::move(loaded.errors);
    return r;
  }
  const manifest::Manifest& m = *loaded.manifest;
  r.findings = lint::lint(m);
  if (std::any_of(r.findings.begin(), r.findings.end(),
                  [](const lint::Finding& f) { return f.severity == lint::Severity::error; })) {
    r.outcome = PushOutcome::lint_errors;
    return r;
  }
  auto text = read_small_file(dir / "soyapack.yaml", manifest::kMaxManifestBytes);
  if (!text) return text.error();

  const fs::path blobs = blob_dir(home_);
  clean_stale_temps(blobs);
  const fs::path tmp = blobs / temp_name();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create " + tmp.string());
  struct TmpGuard {
    const fs::path& p;
    bool keep = false;
    ~TmpGuard() {
      if (!keep) (void)::unlink(p.c_str());
    }
  } guard{tmp};
  auto info = write_archive(dir, fd.get());
  if (!info) return info.error();

  auto same_or_conflict = [&](const PackRecord& existing) {
    r.pack = existing;
    r.outcome = existing.digest == info->digest ? PushOutcome::already_pushed : PushOutcome::conflict;
    if (r.outcome == PushOutcome::conflict) r.attempted_digest = info->digest;
    return r;
  };
  auto existing = store_.pack(m.name, m.version);
  if (!existing) return existing.error();
  if (*existing) return same_or_conflict(**existing);

  // The layer blob: durable before it gets its name, named before any row refers to it.
  if (::fsync(fd.get()) != 0) return errno_error("fsync " + tmp.string());
  fd.reset();
  const fs::path layer = blob_path(home_, info->digest);
  if (::access(layer.c_str(), F_OK) != 0) {
    if (::rename(tmp.c_str(), layer.c_str()) != 0) return errno_error("rename " + tmp.string() + " to " + layer.string());
    guard.keep = true;
    if (auto s = fsync_dir(blobs); !s) return s.error();
  }

  auto manifest_json = yaml_to_json(*text);
  if (!manifest_json) return manifest_json.error();
  json config = {{"name", m.name}, {"version", m.version}, {"tree_digest", info->tree_digest},
                 {"manifest", std::move(*manifest_json)}};
  const std::string config_text = config.dump();
  auto config_digest = put_blob(home_, config_text);
  if (!config_digest) return config_digest.error();
  const std::string ref = m.name + "@" + m.version;
  json image = {
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"artifactType", kArtifactType},
      {"config", {{"mediaType", kConfigMediaType}, {"digest", *config_digest}, {"size", config_text.size()}}},
      {"layers", json::array({{{"mediaType", kPackMediaType},
                               {"digest", info->digest},
                               {"size", info->size},
                               {"annotations", {{"org.opencontainers.image.title", ref + ".tar"}}}}})},
      {"annotations", {{kRefAnnotation, ref}, {kTreeAnnotation, info->tree_digest}}}};
  const std::string image_text = image.dump();
  auto image_digest = put_blob(home_, image_text);
  if (!image_digest) return image_digest.error();

  PackRecord rec;
  rec.name = m.name;
  rec.version = m.version;
  rec.digest = info->digest;
  rec.tree_digest = info->tree_digest;
  rec.oci_manifest = *image_digest;
  rec.oci_manifest_size = static_cast<int64_t>(image_text.size());
  rec.size = static_cast<int64_t>(info->size);
  rec.pushed_at = scope::now_rfc3339();
  rec.manifest = *text;

  scope::RunContext ctx{hostname(), "", m.name, m.version, info->tree_digest};
  json event = scope::make_event(
      ctx, "pack_pushed",
      {{"archive_digest", rec.digest}, {"size", rec.size}, {"oci_manifest", rec.oci_manifest},
       {"actor", actor_json(actor)}});
  event["source"] = "soyaos://" + ctx.host + "/moon";
  event["data"]["run_id"] = nullptr;

  // Pushers take turns from here: the check, index.json, the row.
  auto lock = LayoutLock::take(home_);
  if (!lock) return lock.error();
  existing = store_.pack(m.name, m.version);
  if (!existing) return existing.error();
  if (*existing) return same_or_conflict(**existing);  // a concurrent push got there first
  if (auto s = write_index(&rec); !s) return s.error();
  auto inserted = store_.insert_pack(rec, event);
  if (!inserted) return inserted.error();
  if (!*inserted) return make_error("push " + ref + ": inserted concurrently despite the lock");
  auto stored = store_.pack(m.name, m.version);
  if (!stored) return stored.error();
  r.pack = stored->value_or(rec);
  r.outcome = PushOutcome::pushed;
  return r;
}

Status Registry::write_index(const PackRecord* extra) {
  auto packs = store_.packs();
  if (!packs) return packs.error();
  if (extra != nullptr) packs->push_back(*extra);
  json manifests = json::array();
  for (const auto& p : *packs) {
    manifests.push_back({{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                         {"digest", p.oci_manifest},
                         {"size", p.oci_manifest_size},
                         {"artifactType", kArtifactType},
                         {"annotations", {{kRefAnnotation, p.name + "@" + p.version}}}});
  }
  json index = {{"schemaVersion", 2},
                {"mediaType", "application/vnd.oci.image.index.v1+json"},
                {"manifests", std::move(manifests)}};
  return atomic_write(oci_dir(home_), "index.json", index.dump(2) + "\n", false);
}

Result<PackRecord> Registry::get(const PackRef& ref) {
  auto p = store_.pack(ref.name, ref.version);
  if (!p) return p.error();
  if (!*p) return make_error(ref.str() + " is not in the registry (soyaos pack list shows what is)");
  return **p;
}

Result<PackRecord> Registry::pull(const PackRef& ref, const fs::path& dest_in) {
  auto rec = get(ref);
  if (!rec) return rec.error();
  const fs::path blob = blob_path(home_, rec->digest);
  UniqueFd fd(::open(blob.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return errno_error("blob " + rec->digest + " of " + ref.str() + " cannot be read: open " + blob.string());
  // moon/unpack.h: size and digest verified before anything is unpacked, the tree digest
  // after, nothing left at dest_in on failure (the same checks as a registry pack's pull).
  UnpackExpect expect;
  expect.what = "blob " + rec->digest + " of " + ref.str() + " (" + blob.string() + ")";
  expect.digest = rec->digest;
  expect.size = static_cast<uint64_t>(rec->size);
  expect.size_known = rec->size > 0;
  expect.tree_digest = rec->tree_digest;
  if (auto s = unpack_archive(fd.get(), expect, dest_in); !s) return make_error("pull " + ref.str() + ": " + s.error().describe());
  return *rec;
}

Result<bool> Registry::flag(const std::string& name, const std::string& version, const std::string& digest,
                            const std::string& run_id, const json& violation, const Actor& actor) {
  FlagRecord f;
  f.name = name;
  f.version = version;
  f.digest = digest;
  f.run_id = run_id;
  f.violation = violation.dump(-1, ' ', false, json::error_handler_t::replace);
  f.flagged_at = scope::now_rfc3339();
  scope::RunContext ctx{hostname(), run_id, name, version, digest};
  json event = scope::make_event(ctx, "pack_flagged",
                                 {{"raised", true}, {"flagged_by_run", run_id}, {"flagged_at", f.flagged_at},
                                  {"violation", violation}, {"actor", actor_json(actor)}});
  event["source"] = "soyaos://" + ctx.host + "/moon";
  return store_.add_flag(f, event);
}

Result<std::optional<FlagRecord>> Registry::active_flag(const std::string& name, const std::string& version,
                                                        const std::string& digest) {
  auto all = store_.flags(name, version, digest);
  if (!all) return all.error();
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    if (it->active) return std::optional<FlagRecord>(*it);
  }
  return std::optional<FlagRecord>();
}

Result<int> Registry::unflag(const std::string& name, const std::string& version, const std::string& reason,
                             const Actor& actor) {
  if (reason.find_first_not_of(" \t\r\n") == std::string::npos)
    return make_error("unflag " + name + "@" + version + ": a reason is required (--reason TEXT)");
  auto pushed = store_.pack(name, version);
  if (!pushed) return pushed.error();
  const std::string digest = *pushed ? (*pushed)->tree_digest : std::string();
  scope::RunContext ctx{hostname(), "", name, version, digest};
  json event = scope::make_event(
      ctx, "pack_unflagged",
      {{"reason", reason}, {"actor", actor_json(actor)}});
  event["source"] = "soyaos://" + ctx.host + "/moon";
  event["data"]["run_id"] = nullptr;
  return store_.clear_flags(name, version, digest, actor, reason, std::move(event));
}

namespace {

// j[key] when j is an object holding a string there, else "": a tampered index.json or
// image manifest is reported by verify(), never thrown out of it.
std::string string_at(const json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

Result<std::vector<std::string>> Registry::verify() {
  std::vector<std::string> problems;
  auto packs = store_.packs();
  if (!packs) return packs.error();
  auto check_blob = [&](const std::string& digest, const std::string& what) {
    const fs::path p = blob_path(home_, digest);
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) {
      problems.push_back(what + ": blob " + digest + " is missing");
      return;
    }
    auto d = digest_fd(fd.get());
    if (!d) problems.push_back(what + ": " + d.error().describe());
    else if (*d != digest) problems.push_back(what + ": blob " + digest + " hashes to " + *d);
  };
  std::set<std::string> refs;
  for (const auto& p : *packs) {
    const std::string ref = p.name + "@" + p.version;
    refs.insert(ref);
    check_blob(p.digest, ref + " archive");
    check_blob(p.oci_manifest, ref + " image manifest");
    auto text = read_small_file(blob_path(home_, p.oci_manifest), 1 << 20);
    if (!text) continue;
    const json image = json::parse(*text, nullptr, false);
    if (image.is_discarded() || !image.contains("config")) {
      problems.push_back(ref + ": image manifest is not valid JSON");
      continue;
    }
    check_blob(string_at(image["config"], "digest"), ref + " config");
  }
  auto index_text = read_small_file(oci_dir(home_) / "index.json", 64 << 20);
  if (!index_text) {
    if (!packs->empty()) problems.push_back("index.json: " + index_text.error().describe());
    return problems;
  }
  const json index = json::parse(*index_text, nullptr, false);
  std::set<std::string> listed;
  if (!index.is_discarded() && index.contains("manifests")) {
    for (const auto& m : index["manifests"]) {
      const std::string ref = m.is_object() && m.contains("annotations") ? string_at(m["annotations"], kRefAnnotation) : "";
      listed.insert(ref);
      check_blob(string_at(m, "digest"), "index.json entry " + ref);
    }
  } else {
    problems.push_back("index.json is not a valid OCI index");
  }
  for (const auto& r : refs)
    if (!listed.count(r)) problems.push_back("index.json does not list " + r);
  return problems;
}

Result<std::vector<std::string>> Registry::verify_all() {
  auto problems = verify();
  if (!problems) return problems.error();
  // Every blob file, referenced or not, must hash to its name: a tampered blob no pack
  // names yet (a half-finished push's) would otherwise go unseen until it is used.
  std::error_code ec;
  fs::directory_iterator it(blob_dir(home_), ec);
  if (ec) {
    if (ec != std::errc::no_such_file_or_directory) problems->push_back("oci/blobs/sha256: " + ec.message());
    return problems;
  }
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    names.push_back(it->path().filename().string());
  }
  if (ec) problems->push_back("oci/blobs/sha256: " + ec.message());
  std::sort(names.begin(), names.end());
  const auto already = [&](const std::string& hex) {
    return std::any_of(problems->begin(), problems->end(),
                       [&](const std::string& p) { return p.find(hex) != std::string::npos; });
  };
  for (const std::string& name : names) {
    if (name.rfind(kTmpPrefix, 0) == 0) continue;  // an interrupted write; the next push removes it
    const std::string where = "oci/blobs/sha256/" + name;
    const bool hex = name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex) {
      problems->push_back(where + ": not a blob (the name is not a sha256 digest)");
      continue;
    }
    if (already(name)) continue;  // verify() reported this blob already
    // O_NONBLOCK: a FIFO planted under a blob name cannot hang the check.
    UniqueFd fd(::open((blob_dir(home_) / name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      problems->push_back(where + ": not a regular file");
      continue;
    }
    auto d = digest_fd(fd.get());
    if (!d) {
      problems->push_back(where + ": " + d.error().describe());
    } else if (*d != "sha256:" + name) {
      problems->push_back(where + ": content hashes to " + *d);
    }
  }
  return problems;
}

}  // namespace soyaos::moon
