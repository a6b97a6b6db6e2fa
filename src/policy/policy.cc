#include "policy/policy.h"

#include <sys/stat.h>

#include <algorithm>
#include <string_view>
#include <system_error>

#include "policy/runtime_layer.h"

namespace soyaos::policy {
namespace fs = std::filesystem;
using manifest::Runtime;

namespace {

constexpr const char* kWorkdir = "/workdir";
constexpr const char* kInputs = "/workdir/inputs";
constexpr const char* kOut = "/workdir/out";

// Host directories that make up the runtime layer, bound read-only at the same path.
// Debian 12 is merged-/usr: /bin, /lib, /lib64, /sbin are symlinks into /usr and are
// recreated as symlinks inside the sandbox rather than bound.
const char* const kRuntimeHostPaths[] = {"/usr", "/bin", "/lib", "/lib64", "/sbin"};

// Host files under /etc the interpreters need: CA certificates and OpenSSL's config,
// the dynamic linker's cache. The rest of /etc is generated.
const char* const kEtcHostPaths[] = {"/etc/ssl", "/etc/ld.so.cache"};

// What runtimes probe on their own (/etc/os-release, /proc/stat, ...) is in the runtime
// layer's table, runtime_layer.cc.

bool exists_no_follow(const std::string& path, struct stat* st) {
  return ::lstat(path.c_str(), st) == 0;
}

// Adds a host path of the runtime layer: a symlink is recreated, anything else bound.
void add_runtime_path(Policy& p, const std::string& path) {
  struct stat st {};
  if (!exists_no_follow(path, &st)) return;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    auto target = fs::read_symlink(path, ec);
    if (ec) return;
    p.mounts.push_back({MountSpec::Kind::symlink, target.string(), path, {}, 0});
  } else {
    p.mounts.push_back({MountSpec::Kind::bind_ro, path, path, {}, 0});
  }
  p.fs.runtime.push_back(path);
}

struct OperatorMount {
  std::string host;
  std::string target;
  bool writable = false;
};

Result<OperatorMount> parse_operator_mount(const std::string& spec) {
  // HOST:SANDBOX[:ro|:rw]; host paths may not contain ':' (documented in docs/cli.md).
  OperatorMount m;
  auto first = spec.find(':');
  if (first == std::string::npos) {
    return make_error("--mount " + spec + ": expected HOST:SANDBOX[:ro|:rw]");
  }
  m.host = spec.substr(0, first);
  std::string rest = spec.substr(first + 1);
  auto second = rest.find(':');
  if (second != std::string::npos) {
    std::string mode = rest.substr(second + 1);
    rest = rest.substr(0, second);
    if (mode == "rw") {
      m.writable = true;
    } else if (mode != "ro") {
      return make_error("--mount " + spec + ": mode must be ro or rw, not '" + mode + "'");
    }
  }
  m.target = rest;
  if (!manifest::is_normalised_absolute(m.target)) {
    return make_error("--mount " + spec + ": sandbox path must be absolute and normalised");
  }
  std::error_code ec;
  auto canonical = fs::canonical(m.host, ec);
  if (ec) return make_error("--mount " + spec + ": host path " + m.host, ec.value());
  m.host = canonical.string();
  return m;
}

bool covered_by_any(const std::vector<manifest::FsPath>& prefixes, const std::string& path) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const auto& p) { return manifest::path_covers(p.path, path); });
}

// Paths the Comet owns: the runtime layer and generated files cannot be shadowed.
bool is_reserved(const std::string& path) { return manifest::is_comet_reserved(path); }

// HOME and TMPDIR (M6, docs/sandbox.md "Scratch space"): a declared private scratch path
// when there is one, so tempfile, ~/.cache and friends work in every tier. TMPDIR: /tmp if
// declared, else the first scratch path. HOME: the first scratch path under /home, else /tmp
// if declared, else the first scratch path; /workdir (read-only) when there is none.
struct ScratchDirs {
  std::string home = kWorkdir;
  std::string tmpdir;  // empty: not set
};

ScratchDirs scratch_dirs(const manifest::Manifest& m) {
  std::vector<std::string> scratch;
  for (const auto& w : m.capabilities.fs_write) {
    if (manifest::is_private_scratch(w.path)) scratch.push_back(w.path);
  }
  ScratchDirs d;
  if (scratch.empty()) return d;
  const bool has_tmp = std::find(scratch.begin(), scratch.end(), "/tmp") != scratch.end();
  d.tmpdir = has_tmp ? "/tmp" : scratch.front();
  auto home = std::find_if(scratch.begin(), scratch.end(), [](const auto& p) { return manifest::path_covers("/home", p); });
  d.home = home != scratch.end() ? *home : d.tmpdir;
  return d;
}

}  // namespace

std::vector<std::string> runtime_layer_paths(Runtime runtime) {
  std::vector<std::string> paths(std::begin(kRuntimeHostPaths), std::end(kRuntimeHostPaths));
  paths.insert(paths.end(), std::begin(kEtcHostPaths), std::end(kEtcHostPaths));
  for (const auto& probe : runtime_probes()) {
    if (probe.kind == ProbeKind::host && probe_applies(probe, runtime)) paths.emplace_back(probe.path);
  }
  return paths;
}

std::string generated_passwd(uid_t uid, gid_t gid, const std::string& home) {
  return "root:x:0:0:root:/:/usr/sbin/nologin\n"
         "agent:x:" + std::to_string(uid) + ":" + std::to_string(gid) +
         ":SoyaOS agent:" + home + ":/usr/sbin/nologin\n"
         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
}

std::string generated_group(gid_t gid) {
  return "root:x:0:\nagent:x:" + std::to_string(gid) + ":\nnogroup:x:65534:\n";
}

namespace {

bool valid_input_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!alnum && (i == 0 || (c != '.' && c != '-'))) return false;
  }
  return true;
}

}  // namespace

InputSpec parse_input_arg(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq != std::string::npos && valid_input_name(std::string_view(arg).substr(0, eq))) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  return {"", arg};
}

Result<std::vector<std::string>> input_targets(const std::vector<InputSpec>& inputs) {
  if (inputs.size() > kMaxInputs) {
    return make_error("--input: at most " + std::to_string(kMaxInputs) + " inputs per run");
  }
  std::vector<std::string> targets;
  std::vector<std::string> names;
  for (const auto& in : inputs) {
    const std::string what = "--input " + (in.name.empty() ? "" : in.name + "=") + in.path.string();
    if (in.path.empty()) return make_error(what + ": no path");
    std::error_code ec;
    auto st = fs::status(in.path, ec);
    if (ec) return make_error(what, ec.value());
    if (!fs::is_directory(st) && !fs::is_regular_file(st)) return make_error(what + ": not a file or directory");
    std::string name = in.name;
    if (name.empty() && fs::is_directory(st)) {
      if (inputs.size() > 1) {
        return make_error(what + ": an unnamed directory input is /workdir/inputs itself, so it must be the only "
                          "input; name each one (--input NAME=PATH)");
      }
      targets.emplace_back(kInputs);
      break;
    }
    if (name.empty()) {
      // An unnamed file keeps its file name (T6).
      name = in.path.lexically_normal().filename().string();
      if (name.empty() || name == "." || name == ".." || name.size() > 255) {
        return make_error(what + ": cannot tell its file name; name it (--input NAME=PATH)");
      }
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return make_error(what + ": /workdir/inputs/" + name + " is given twice; name each one (--input NAME=PATH)");
    }
    names.push_back(name);
    targets.push_back(std::string(kInputs) + "/" + name);
  }
  return targets;
}

Result<Policy> compile_policy(const manifest::Manifest& m, const RunOptions& options) {
  Policy p;
  p.identity = {options.run_id, m.name, m.version, options.digest};
  p.runtime = m.agent.runtime;
  p.limits = {m.resources.memory_bytes, m.resources.pids, m.resources.timeout_ms,
              m.resources.write_quota_bytes, m.resources.open_files};
  p.limits.grace_ms = m.resources.grace_ms;
  p.egress_any = m.capabilities.egress_any;
  p.egress = m.capabilities.egress;
  for (const auto& e : p.egress) p.moon_proxy = p.moon_proxy || e.protocol == manifest::Protocol::moon_proxy;

  const std::string entry = std::string(kWorkdir) + "/" + m.agent.entrypoint;
  switch (m.agent.runtime) {
    case Runtime::python3:
      p.executable = "/usr/bin/python3";
      // -B: never write .pyc next to the pack (/workdir is read-only); -s: no user site.
      p.argv = {"python3", "-B", "-s", entry};
      break;
    case Runtime::node: {
      p.executable = "/usr/bin/node";
      p.argv = {"node"};
      // V8 sizes its heap from the memory it believes the machine has; libuv cannot see the
      // Comet's cgroup, so that is the host's (a 4 GB heap under a 512Mi limit): the agent
      // would die of the limit instead of collecting garbage. As Node does under a container
      // limit it can see: a quarter of resources.memory for the old generation, unless the
      // manifest chose its own in NODE_OPTIONS.
      auto opts = m.agent.env.find("NODE_OPTIONS");
      const bool chosen = opts != m.agent.env.end() && opts->second.find("max-old-space-size") != std::string::npos;
      if (m.resources.memory_bytes > 0 && !chosen) {
        const uint64_t mib = std::max<uint64_t>(16, m.resources.memory_bytes / 4 / (uint64_t{1024} * 1024));
        p.argv.push_back("--max-old-space-size=" + std::to_string(mib));
      }
      p.argv.push_back(entry);
      break;
    }
    case Runtime::native:
      p.executable = entry;
      p.argv = {entry};
      break;
  }
  p.argv.insert(p.argv.end(), m.agent.args.begin(), m.agent.args.end());
  p.argv.insert(p.argv.end(), options.extra_args.begin(), options.extra_args.end());

  // C5: only what the manifest sets plus PATH, HOME, LANG, TZ and the proxy variables of C7.
  const ScratchDirs dirs = scratch_dirs(m);
  std::vector<std::pair<std::string, std::string>> env = {
      {"PATH", "/usr/bin:/bin"}, {"HOME", dirs.home}, {"LANG", "C.UTF-8"}, {"TZ", "UTC"}};
  if (!dirs.tmpdir.empty()) env.emplace_back("TMPDIR", dirs.tmpdir);
  if (p.moon_proxy) {
    const std::string proxy = std::string("http://") + kMoonProxyHost + ":" + std::to_string(kMoonProxyPort);
    // Both spellings: curl and Python read the lower-case ones, many others the upper.
    for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) env.emplace_back(name, proxy);
  }
  for (const auto& var : m.agent.env) {
    const std::string& name = var.first;
    auto it = std::find_if(env.begin(), env.end(), [&name](const auto& e) { return e.first == name; });
    if (it != env.end()) {
      it->second = var.second;
    } else {
      env.emplace_back(var);
    }
  }
  // C11: a secret's variable holds the run's placeholder. Validation keeps secret names
  // apart from agent.env and the variables above (manifest::is_reserved_env_name).
  for (const auto& [name, placeholder] : options.secret_placeholders) env.emplace_back(name, placeholder);
  for (const auto& [k, v] : env) p.env.push_back(k + "=" + v);

  // Runtime layer.
  for (const char* path : kRuntimeHostPaths) add_runtime_path(p, path);
  for (const char* path : kEtcHostPaths) add_runtime_path(p, path);
  // What the runtime probes on its own (issue #11): the runtime layer's table. Every row is
  // a runtime path (reading it is never the agent's violation); host files are bound,
  // generated ones written, /proc rows served by the supervisor, absent ones left absent.
  for (const auto& probe : runtime_probes()) {
    if (!probe_applies(probe, m.agent.runtime)) continue;
    switch (probe.kind) {
      case ProbeKind::host:
        add_runtime_path(p, probe.path);
        break;
      case ProbeKind::generated:
        p.mounts.push_back({MountSpec::Kind::file, {}, probe.path, generated_probe_content(probe), 0});
        break;
      case ProbeKind::link:
        p.mounts.push_back({MountSpec::Kind::symlink, probe.answer, probe.path, {}, 0});
        break;
      case ProbeKind::served:
      case ProbeKind::absent:
        break;
    }
    if (std::find(p.fs.runtime.begin(), p.fs.runtime.end(), probe.path) == p.fs.runtime.end()) {
      p.fs.runtime.emplace_back(probe.path);
    }
  }
  const std::pair<const char*, std::string> generated[] = {
      {"/etc/passwd", generated_passwd(p.sandbox_uid, p.sandbox_gid, dirs.home)},
      {"/etc/group", generated_group(p.sandbox_gid)},
      {"/etc/hosts", std::string("127.0.0.1 localhost\n::1 localhost\n127.0.1.1 comet\n") +
                         (p.moon_proxy ? std::string("127.0.0.1 ") + kMoonProxyHost + "\n" : "")},
      {"/etc/resolv.conf", "nameserver 127.0.0.1\noptions edns0\n"},
      {"/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"},
  };
  for (const auto& [path, content] : generated) {
    p.mounts.push_back({MountSpec::Kind::file, {}, path, content, 0});
    p.fs.runtime.push_back(path);
  }
  p.mounts.push_back({MountSpec::Kind::dev, {}, "/dev", {}, 0});
  p.fs.runtime.push_back("/dev");
  p.mounts.push_back({MountSpec::Kind::proc, {}, "/proc", {}, 0});
  p.fs.runtime.push_back("/proc");

  // The pack, read-only (M5), then its inputs and outputs.
  std::error_code ec;
  auto pack = fs::canonical(m.pack_dir, ec);
  if (ec) return make_error("pack directory " + m.pack_dir.string(), ec.value());
  p.mounts.push_back({MountSpec::Kind::pack_root, pack.string(), kWorkdir, {}, 0});
  for (const auto& rel : options.pack_excluded) {
    // /workdir/out is always a tmpfs over the pack's out/; /workdir/inputs is a mount
    // point directory merged with the pack's inputs/ (a whiteout cannot stand there), so an
    // excluded inputs/ is hidden entry by entry.
    if (rel == "out" || rel.starts_with("out/")) continue;
    if (rel != "inputs") {
      p.mounts.back().hide.push_back(rel);
      continue;
    }
    for (fs::directory_iterator it(pack / rel, ec), end; !ec && it != end; it.increment(ec)) {
      p.mounts.back().hide.push_back(rel + "/" + it->path().filename().string());
    }
    if (ec && ec != std::errc::not_a_directory) return make_error("read " + (pack / rel).string(), ec.value());
    ec.clear();
  }
  p.fs.read.push_back(kWorkdir);
  auto targets = input_targets(options.inputs);
  if (!targets) return targets.error();
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    auto input = fs::canonical(options.inputs[i].path, ec);
    if (ec) return make_error("--input " + options.inputs[i].path.string(), ec.value());
    p.mounts.push_back({MountSpec::Kind::bind_ro, input.string(), (*targets)[i], {}, 0, /*mask_source=*/true});
  }
  p.fs.read.push_back(kInputs);

  p.out_writable = covered_by_any(m.capabilities.fs_write, kOut);
  p.mounts.push_back({MountSpec::Kind::tmpfs_rw, {}, kOut, {}, p.limits.write_quota_bytes});
  p.out_host_dir = options.out ? *options.out : fs::path("soyaos-out") / options.run_id;

  p.fs.declared_read = m.capabilities.fs_read;
  p.fs.declared_write = m.capabilities.fs_write;
  for (const auto& r : m.capabilities.fs_read) {
    if (!manifest::path_covers(kWorkdir, r.path)) p.fs.read.push_back(r.path);
  }
  // Other declared write paths: private, empty, discarded (C2); each is a directory of the
  // one write-quota tmpfs that /workdir/out shares (M1: one total, bytes and inodes).
  for (const auto& w : m.capabilities.fs_write) {
    p.fs.write.push_back(w.path);
    if (manifest::path_covers(kOut, w.path)) continue;  // inside the collected tmpfs
    if (is_reserved(w.path)) {
      return make_error(w.key_path + ": cannot make " + w.path +
                        " writable: it is inside the Comet's runtime layer");
    }
    p.mounts.push_back({MountSpec::Kind::tmpfs_rw, {}, w.path, {}, p.limits.write_quota_bytes});
  }

  // Operator data (--mount): only at a path the manifest declares (C2).
  for (const auto& spec : options.mounts) {
    auto om = parse_operator_mount(spec);
    if (!om) return om.error();
    bool declared = om->writable ? covered_by_any(m.capabilities.fs_write, om->target)
                                 : covered_by_any(m.capabilities.fs_read, om->target) ||
                                       covered_by_any(m.capabilities.fs_write, om->target);
    if (!declared) {
      return make_error("--mount " + spec + ": " + om->target + " is not declared under " +
                        (om->writable ? "capabilities.fs.write" : "capabilities.fs.read"));
    }
    if (om->writable && m.capabilities.tier == manifest::Tier::read_only) {
      // M6: operator data written by a read-only pack would outlive the run and not be
      // replayed from the cache.
      return make_error("--mount " + spec + ": a read-only pack may not write operator data (:rw); "
                        "declare determinism_tier: side-effect");
    }
    if (is_reserved(om->target) || om->target == kWorkdir || om->target == kOut) {
      return make_error("--mount " + spec + ": " + om->target + " is reserved by the Comet");
    }
    p.mounts.push_back({om->writable ? MountSpec::Kind::bind_rw : MountSpec::Kind::bind_ro,
                        om->host, om->target, {}, 0, /*mask_source=*/!om->writable});
    if (!om->writable) p.fs.read.push_back(om->target);
  }
  return p;
}

}  // namespace soyaos::policy
