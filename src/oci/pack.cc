#include "oci/pack.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/archive.h"
#include "moon/registry.h"
#include "moon/unpack.h"
#include "scope/events.h"

namespace soyaos::oci {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr uint64_t kMaxConfigBytes = uint64_t{4} << 20;
constexpr uint64_t kMaxLayerBytes = uint64_t{8} << 30;  // 8 GiB: far above any sane pack
constexpr std::size_t kMaxRefsBytes = std::size_t{16} << 20;
constexpr const char* kTreeAnnotation = "org.soyaos.pack.tree_digest";

std::string str_at(const json& o, const char* k) {
  auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("write");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<std::string> read_file(const fs::path& p, std::size_t max, bool* missing = nullptr) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT && missing != nullptr) {
      *missing = true;
      return std::string();
    }
    return errno_error("open " + p.string());
  }
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read " + p.string());
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max) return make_error(p.string() + ": larger than " + std::to_string(max) + " bytes");
  }
  return out;
}

std::string temp_suffix() { return ".tmp-" + std::to_string(::getpid()) + "-" + scope::new_event_id().substr(0, 8); }

// An exclusive lock on HOME/remote/.lock for a read-modify-write of refs.json.
struct RefsLock {
  UniqueFd fd;
  static Result<RefsLock> take(const fs::path& dir) {
    RefsLock l;
    l.fd = UniqueFd(::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!l.fd) return errno_error("open " + (dir / ".lock").string());
    while (::flock(l.fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return errno_error("lock " + (dir / ".lock").string());
    }
    return l;
  }
};

}  // namespace

Status parse_pack_manifest(const std::string& bytes, RemotePack& out) {
  json j = json::parse(bytes, nullptr, false);
  if (!j.is_object()) return make_error("the image manifest is not a JSON object");
  if (!j.contains("schemaVersion") || j["schemaVersion"] != 2) return make_error("the image manifest's schemaVersion is not 2");
  if (str_at(j, "mediaType") != kImageManifest) {
    return make_error("the image manifest's mediaType is \"" + str_at(j, "mediaType") + "\", not " + kImageManifest);
  }
  const std::string at = str_at(j, "artifactType");
  if (at != moon::kArtifactType) {
    return make_error("not a SoyaOS pack: artifactType is \"" + at + "\", not " + moon::kArtifactType);
  }
  if (!j.contains("config")) return make_error("the image manifest has no config");
  auto cfg = Descriptor::from_json(j["config"], "config");
  if (!cfg) return cfg.error();
  if (cfg->media_type != moon::kConfigMediaType) {
    return make_error("the config's mediaType is \"" + cfg->media_type + "\", not " + moon::kConfigMediaType);
  }
  if (cfg->size > kMaxConfigBytes) return make_error("the config blob is larger than 4 MiB");
  if (!j.contains("layers") || !j["layers"].is_array() || j["layers"].size() != 1) {
    return make_error("a pack's image manifest has exactly one layer");
  }
  auto layer = Descriptor::from_json(j["layers"][0], "layers[0]");
  if (!layer) return layer.error();
  if (layer->media_type != moon::kPackMediaType) {
    return make_error("the layer's mediaType is \"" + layer->media_type + "\", not " + moon::kPackMediaType);
  }
  if (layer->size > kMaxLayerBytes) return make_error("the layer is larger than 8 GiB");
  out.manifest_bytes = bytes;
  out.manifest_digest = "sha256:" + sha256_hex(bytes);
  out.config = std::move(*cfg);
  out.layer = std::move(*layer);
  out.annotations = j.contains("annotations") && j["annotations"].is_object() ? j["annotations"] : json::object();
  return {};
}

Status parse_pack_config(const std::string& bytes, RemotePack& out) {
  json j = json::parse(bytes, nullptr, false);
  if (!j.is_object()) return make_error("the pack config is not a JSON object");
  static const std::regex kName("^[a-z][a-z0-9-]{0,62}$");
  const std::string name = str_at(j, "name"), version = str_at(j, "version"), tree = str_at(j, "tree_digest");
  if (!std::regex_match(name, kName)) return make_error("the pack config's name is missing or not a pack name");
  if (version.empty() || version.size() > 256) return make_error("the pack config's version is missing");
  if (!valid_digest(tree)) return make_error("the pack config's tree_digest is not a sha256 digest");
  if (!j.contains("manifest") || !j["manifest"].is_object()) return make_error("the pack config holds no manifest object");
  out.name = name;
  out.version = version;
  out.tree_digest = tree;
  out.config_json = std::move(j);
  out.config_bytes = bytes;
  return {};
}

Result<RemotePack> resolve_pack(Client& client, const Reference& ref) {
  auto m = client.get_manifest(ref.repository, ref.target(), {kImageManifest});
  if (!m) return m.error();
  if (!*m) return make_error(ref.str() + ": not found in the registry");
  RemotePack p;
  p.ref = ref;
  if (auto s = parse_pack_manifest((*m)->bytes, p); !s) return make_error(ref.str() + ": " + s.error().message);
  auto cfg = client.get_blob(ref.repository, p.config, kMaxConfigBytes);
  if (!cfg) return cfg.error();
  if (auto s = parse_pack_config(*cfg, p); !s) return make_error(ref.str() + ": " + s.error().message);
  if (str_at(p.annotations, kTreeAnnotation) != "" && str_at(p.annotations, kTreeAnnotation) != p.tree_digest) {
    return make_error(ref.str() + ": the manifest's tree digest annotation disagrees with its config");
  }
  return p;
}

Result<PushReport> push_pack(Client& client, const fs::path& home, const fs::path& dir, const Reference& ref,
                             const std::string& source) {
  PushReport r;
  auto loaded = manifest::load_pack(dir);
  if (!loaded.manifest) {
    r.outcome = PushReport::Outcome::invalid;
    r.diagnostics = std::move(loaded.errors);
    return r;
  }
  const manifest::Manifest& m = *loaded.manifest;
  r.findings = lint::lint(m);
  if (std::any_of(r.findings.begin(), r.findings.end(),
                  [](const lint::Finding& f) { return f.severity == lint::Severity::error; })) {
    r.outcome = PushReport::Outcome::lint_errors;
    return r;
  }
  auto text = read_file(dir / "soyapack.yaml", manifest::kMaxManifestBytes);
  if (!text) return text.error();
  RemoteStore store(home);
  const fs::path blobs = store.blob_path("sha256:0").parent_path();
  std::error_code ec;
  fs::create_directories(blobs, ec);
  if (ec) return make_error("create " + blobs.string(), ec.value());
  const fs::path tmp = blobs / temp_suffix();
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create " + tmp.string());
  struct Guard {
    const fs::path& p;
    ~Guard() { (void)::unlink(p.c_str()); }
  } guard{tmp};
  auto info = moon::write_archive(dir, fd.get());
  if (!info) return info.error();
  auto manifest_json = moon::yaml_to_json(*text);
  if (!manifest_json) return manifest_json.error();
  // Byte for byte the local registry's config blob (moon/registry.cc), so both digests agree.
  const json config = {{"name", m.name}, {"version", m.version}, {"tree_digest", info->tree_digest},
                       {"manifest", std::move(*manifest_json)}};
  const std::string config_text = config.dump();
  const std::string config_digest = "sha256:" + sha256_hex(config_text);
  json annotations = {{"org.opencontainers.image.title", m.name}, {"org.opencontainers.image.version", m.version}};
  if (!m.description.empty()) annotations["org.opencontainers.image.description"] = m.description;
  if (!source.empty()) annotations["org.opencontainers.image.source"] = source;
  annotations[kTreeAnnotation] = info->tree_digest;
  const json image = {
      {"schemaVersion", 2},
      {"mediaType", kImageManifest},
      {"artifactType", moon::kArtifactType},
      {"config", {{"mediaType", moon::kConfigMediaType}, {"digest", config_digest}, {"size", config_text.size()}}},
      {"layers", json::array({{{"mediaType", moon::kPackMediaType},
                               {"digest", info->digest},
                               {"size", info->size},
                               {"annotations", {{"org.opencontainers.image.title", m.name + "@" + m.version + ".tar"}}}}})},
      {"annotations", annotations}};
  const std::string image_text = image.dump();
  RemotePack& p = r.pack;
  p.ref = ref;
  if (auto s = parse_pack_manifest(image_text, p); !s) return s.error();
  if (auto s = parse_pack_config(config_text, p); !s) return s.error();
  if (!ref.digest.empty() && ref.digest != p.manifest_digest) {
    return make_error("push " + ref.str() + ": this pack's manifest is " + p.manifest_digest +
                      ", not the digest the reference pins");
  }
  if (auto s = client.push_blob(ref.repository, config_text, config_digest); !s) return s.error();
  if (auto s = client.push_blob_fd(ref.repository, fd.get(), info->size, info->digest,
                                   store.repositories_holding(ref.registry, info->digest));
      !s) {
    return s.error();
  }
  auto put = client.put_manifest(ref.repository, ref.digest.empty() ? ref.tag : ref.digest, image_text, kImageManifest);
  if (!put) return put.error();
  if (auto s = store.record(p, tmp.string()); !s) return s.error();
  return r;
}

// ---- RemoteStore ----

fs::path RemoteStore::blob_path(const std::string& digest) const {
  return home_ / "remote" / "blobs" / "sha256" / digest.substr(digest.find(':') + 1);
}

Status RemoteStore::store_blob(const std::string& digest, const std::string& bytes) {
  const fs::path target = blob_path(digest);
  if (::access(target.c_str(), F_OK) == 0) return {};
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) return make_error("create " + target.parent_path().string(), ec.value());
  const fs::path tmp = target.parent_path() / temp_suffix();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create " + tmp.string());
  Status s = write_all(fd.get(), bytes);
  if (s && ::fsync(fd.get()) != 0) s = errno_error("fsync " + tmp.string());
  if (s && ::rename(tmp.c_str(), target.c_str()) != 0) s = errno_error("rename " + tmp.string());
  if (!s) (void)::unlink(tmp.c_str());
  return s;
}

Status RemoteStore::write_ref(const Reference& ref, const std::string& manifest_digest) {
  const fs::path dir = home_ / "remote";
  auto lock = RefsLock::take(dir);
  if (!lock) return lock.error();
  bool missing = false;
  auto text = read_file(dir / "refs.json", kMaxRefsBytes, &missing);
  if (!text) return text.error();
  json refs = missing ? json::object() : json::parse(*text, nullptr, false);
  if (!refs.is_object()) refs = json::object();  // a damaged index is rebuilt by the next pulls
  refs[ref.str()] = {{"manifest", manifest_digest}, {"at", scope::now_rfc3339()}};
  const fs::path tmp = dir / ("refs.json" + temp_suffix());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create " + tmp.string());
  Status s = write_all(fd.get(), refs.dump(1) + "\n");
  if (s && ::fsync(fd.get()) != 0) s = errno_error("fsync " + tmp.string());
  if (s && ::rename(tmp.c_str(), (dir / "refs.json").c_str()) != 0) s = errno_error("rename " + tmp.string());
  if (!s) (void)::unlink(tmp.c_str());
  return s;
}

Result<std::optional<RemotePack>> RemoteStore::lookup(const Reference& ref) {
  std::string digest = ref.digest;
  if (digest.empty()) {
    bool missing = false;
    auto text = read_file(home_ / "remote" / "refs.json", kMaxRefsBytes, &missing);
    if (!text) return text.error();
    if (missing) return std::optional<RemotePack>();
    json refs = json::parse(*text, nullptr, false);
    if (!refs.is_object() || !refs.contains(ref.str()) || !refs[ref.str()].is_object()) return std::optional<RemotePack>();
    digest = str_at(refs[ref.str()], "manifest");
    if (!valid_digest(digest)) return std::optional<RemotePack>();
  }
  bool missing = false;
  auto bytes = read_file(blob_path(digest), kMaxManifestBytes, &missing);
  if (!bytes) return bytes.error();
  if (missing) return std::optional<RemotePack>();
  if ("sha256:" + sha256_hex(*bytes) != digest) {
    return make_error("the local copy of " + ref.str() + " (" + blob_path(digest).string() +
                      ") does not match its digest; pull it again");
  }
  RemotePack p;
  p.ref = ref;
  if (auto s = parse_pack_manifest(*bytes, p); !s) return s.error();
  missing = false;
  auto cfg = read_file(blob_path(p.config.digest), kMaxConfigBytes, &missing);
  if (!cfg) return cfg.error();
  if (missing || ::access(blob_path(p.layer.digest).c_str(), F_OK) != 0) return std::optional<RemotePack>();
  if ("sha256:" + sha256_hex(*cfg) != p.config.digest) {
    return make_error("the local copy of " + ref.str() + "'s config does not match its digest; pull it again");
  }
  if (auto s = parse_pack_config(*cfg, p); !s) return s.error();
  return std::optional<RemotePack>(std::move(p));
}

Status RemoteStore::fetch(Client& client, const RemotePack& pack, UniqueFd* verified_layer) {
  const fs::path layer = blob_path(pack.layer.digest);
  if (::access(layer.c_str(), F_OK) != 0) {
    std::error_code ec;
    fs::create_directories(layer.parent_path(), ec);
    if (ec) return make_error("create " + layer.parent_path().string(), ec.value());
    const fs::path tmp = layer.parent_path() / temp_suffix();
    UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd) return errno_error("create " + tmp.string());
    // Hashed as it arrives and verified (size and digest) before it is named or unpacked.
    Status s = client.get_blob_to_fd(pack.ref.repository, pack.layer, fd.get());
    if (s && ::fsync(fd.get()) != 0) s = errno_error("fsync " + tmp.string());
    if (s && ::rename(tmp.c_str(), layer.c_str()) != 0) s = errno_error("rename " + tmp.string());
    if (!s) {
      (void)::unlink(tmp.c_str());
      return s;
    }
    if (verified_layer != nullptr) *verified_layer = std::move(fd);
  }
  if (auto s = store_blob(pack.config.digest, pack.config_bytes); !s) return s;
  if (auto s = store_blob(pack.manifest_digest, pack.manifest_bytes); !s) return s;
  if (auto s = write_ref(pack.ref, pack.manifest_digest); !s) return s;
  if (pack.ref.digest.empty()) return write_ref(pack.ref.pinned(pack.manifest_digest), pack.manifest_digest);
  return {};
}

Status RemoteStore::record(const RemotePack& pack, const std::string& layer_file) {
  const fs::path layer = blob_path(pack.layer.digest);
  if (::access(layer.c_str(), F_OK) != 0 && ::link(layer_file.c_str(), layer.c_str()) != 0 && errno != EEXIST) {
    return errno_error("link " + layer.string());
  }
  if (auto s = store_blob(pack.config.digest, pack.config_bytes); !s) return s;
  if (auto s = store_blob(pack.manifest_digest, pack.manifest_bytes); !s) return s;
  return write_ref(pack.ref, pack.manifest_digest);
}

Result<std::vector<RemoteStore::Recorded>> RemoteStore::recorded() {
  bool missing = false;
  auto text = read_file(home_ / "remote" / "refs.json", kMaxRefsBytes, &missing);
  if (!text) return text.error();
  std::vector<Recorded> out;
  if (missing) return out;
  const json refs = json::parse(*text, nullptr, false);
  if (!refs.is_object()) return make_error((home_ / "remote" / "refs.json").string() + " is not a JSON object");
  for (const auto& [k, v] : refs.items()) {
    std::string why;
    auto r = parse_reference(k, why);
    // A damaged entry is listed with what is wrong with it (the others are unaffected).
    if (!r) {
      out.push_back({k, "", "", "not a registry reference: " + why});
      continue;
    }
    if (!v.is_object() || !valid_digest(str_at(v, "manifest"))) {
      out.push_back({k, "", "", "its entry in refs.json names no manifest digest (pull it again)"});
      continue;
    }
    if (!r->digest.empty()) {
      Reference tagged = *r;
      tagged.digest.clear();
      const auto t = refs.find(tagged.str());
      if (t != refs.end() && t->is_object() && str_at(*t, "manifest") == r->digest) continue;
    }
    out.push_back({k, str_at(v, "manifest"), str_at(v, "at"), ""});
  }
  std::sort(out.begin(), out.end(), [](const Recorded& a, const Recorded& b) { return a.reference < b.reference; });
  return out;
}

std::vector<std::string> RemoteStore::repositories_holding(const std::string& registry, const std::string& digest) {
  std::vector<std::string> out;
  auto text = read_file(home_ / "remote" / "refs.json", kMaxRefsBytes);
  if (!text) return out;
  json refs = json::parse(*text, nullptr, false);
  if (!refs.is_object()) return out;
  for (const auto& [k, v] : refs.items()) {
    std::string why;
    auto r = parse_reference(k, why);
    if (!r || r->registry != registry || !v.is_object()) continue;
    if (std::find(out.begin(), out.end(), r->repository) != out.end()) continue;
    auto bytes = read_file(blob_path(str_at(v, "manifest")), kMaxManifestBytes);
    if (!bytes) continue;
    RemotePack p;
    if (parse_pack_manifest(*bytes, p) && p.layer.digest == digest) out.push_back(r->repository);
  }
  return out;
}

Status RemoteStore::extract(const RemotePack& pack, const fs::path& dest, int verified_fd) {
  UniqueFd opened;
  int fd = verified_fd;
  const fs::path blob = blob_path(pack.layer.digest);
  if (fd < 0) {
    opened = UniqueFd(::open(blob.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!opened) return errno_error("open " + blob.string());
    fd = opened.get();
  }
  // moon/unpack.h: the same checks as the local registry's pull. A stored layer is hashed
  // before anything is unpacked (it may have changed since it was pulled); one this
  // process has just downloaded was hashed as it arrived and is not read twice.
  moon::UnpackExpect expect;
  expect.what = "the layer " + pack.layer.digest + " of " + pack.ref.str() + " (" + blob.string() + ")";
  expect.digest = pack.layer.digest;
  expect.size = pack.layer.size;
  expect.size_known = true;
  expect.tree_digest = pack.tree_digest;
  expect.verified = verified_fd >= 0;
  return moon::unpack_archive(fd, expect, dest);
}

}  // namespace soyaos::oci
