// parse_manifest: text -> typed Manifest (SPEC.md §1, M1-M6), collecting every error.
//
// The YAML is first turned into a bounded YNode tree (yaml_tree.cc); this file walks it
// with a fixed schema. Every mapping is checked for unknown and duplicate keys, every
// value for its type and rule, and each problem becomes one Diagnostic naming the key
// path and the line:column of the offending node (the enclosing mapping for a missing
// key). Tier coherence (M6) is checked last, on the typed result.
#include <algorithm>
#include <initializer_list>
#include <map>
#include <string_view>
#include <unordered_set>

#include "common/text.h"
#include "manifest/diagnostic_text.h"
#include "manifest/manifest.h"
#include "manifest/parser_secrets.h"
#include "manifest/rules.h"
#include "manifest/walker.h"
#include "manifest/yaml_tree.h"

namespace soyaos::manifest {

// Escaped for a terminal (common/text.h): a key path and a message quote the pack's own text,
// and a hostile pack's key "\e[2J…\n" must not clear a reviewer's screen or start a line of
// its own. Every caller prints this line or carries it in an error message.
std::string Diagnostic::format() const { return escape_for_terminal(raw_text(*this)); }

std::string raw_text(const Diagnostic& d) {
  std::string out = d.file;
  if (d.mark.line > 0) {
    out += ':' + std::to_string(d.mark.line) + ':' + std::to_string(d.mark.column);
  }
  out += ": error: ";
  if (!d.key_path.empty()) out += d.key_path + ": ";
  out += d.message;
  return out;
}

namespace {

using detail::Fields;
using detail::Kind;
using detail::Walker;
using detail::YNode;
using detail::describe;
using detail::index;
using detail::join;
using detail::quote;

constexpr const char* kToolKinds =
    "builtin.http_get, builtin.http_post, builtin.http_put, builtin.http_patch, builtin.http_delete, "
    "builtin.llm, builtin.fs_read, builtin.fs_write, custom";

bool is_http_kind(ToolKind k) {
  return k == ToolKind::http_get || k == ToolKind::http_post || k == ToolKind::http_put ||
         k == ToolKind::http_patch || k == ToolKind::http_delete || k == ToolKind::llm;
}
bool is_fs_kind(ToolKind k) { return k == ToolKind::fs_read || k == ToolKind::fs_write; }

class ManifestParser {
 public:
  ManifestParser(const std::string& file, std::vector<Diagnostic>& errors) : w_(file, errors) {}

  void parse(const YNode& root, Manifest& m) {
    auto top = w_.fields(root, "", {"soyapack", "name", "version", "description", "agent", "tools",
                                    "secrets", "capabilities", "resources", "examples"});
    if (!top) return;
    if (const YNode* v = w_.required(*top, "soyapack")) {
      if (auto s = w_.string(*v, "soyapack"); s && *s != "v0") {
        w_.error(*v, "soyapack", "unsupported manifest format " + quote(*s) + "; must be \"v0\"");
      }
    }
    if (const YNode* v = w_.required(*top, "name")) {
      m.name_mark = v->mark;
      if (auto s = w_.string(*v, "name")) {
        if (detail::is_pack_name(*s)) {
          m.name = *s;
        } else {
          w_.error(*v, "name", quote(*s) + " must match ^[a-z][a-z0-9-]{0,62}$");
        }
      }
    }
    if (const YNode* v = w_.required(*top, "version")) {
      m.version_mark = v->mark;
      if (auto s = w_.string(*v, "version")) {
        if (detail::is_semver(*s)) {
          m.version = *s;
        } else {
          w_.error(*v, "version", quote(*s) + " is not a semantic version (MAJOR.MINOR.PATCH, semver.org 2.0)");
        }
      }
    }
    if (const YNode* v = top->get("description")) {
      if (auto s = w_.string(*v, "description")) m.description = *s;
    }
    if (const YNode* v = w_.required(*top, "agent")) parse_agent(*v, m.agent);
    if (const YNode* v = top->get("tools")) parse_tools(*v, m.tools);
    if (const YNode* v = w_.required(*top, "capabilities")) parse_capabilities(*v, m.capabilities);
    if (const YNode* v = top->get("resources")) parse_resources(*v, m.resources);
    if (const YNode* v = top->get("examples")) parse_examples(*v, m);
    if (const YNode* v = top->get("secrets")) {
      detail::parse_secrets(w_, *v, m.secrets);
      detail::check_secret_names(w_, m);
    }
    if (top->get("capabilities") != nullptr) check_tiers(m);
  }

 private:
  Walker w_;
  bool tier_ok_ = false;

  void parse_agent(const YNode& n, Agent& a) {
    auto f = w_.fields(n, "agent", {"runtime", "entrypoint", "args", "env"});
    if (!f) return;
    a.mark = n.mark;
    if (const YNode* v = w_.required(*f, "runtime")) {
      if (auto s = w_.string(*v, "agent.runtime")) {
        if (auto r = runtime_from_string(*s)) {
          a.runtime = *r;
        } else {
          w_.error(*v, "agent.runtime", "unknown runtime " + quote(*s) + " (python3, node or native)");
        }
      }
    }
    if (const YNode* v = w_.required(*f, "entrypoint")) {
      a.entrypoint_mark = v->mark;
      if (auto s = w_.string(*v, "agent.entrypoint")) {
        if (detail::is_normalised_relative(*s)) {
          a.entrypoint = *s;
        } else {
          w_.error(*v, "agent.entrypoint",
                   "must be a relative path inside the pack (no leading '/', no '..' or '.', no trailing '/')");
        }
      }
    }
    if (const YNode* v = f->get("args")) a.args = w_.string_list(*v, "agent.args", &a.arg_marks);
    if (const YNode* v = f->get("env")) {
      if (auto env = w_.fields(*v, "agent.env", {}, /*any_keys=*/true)) {
        for (const auto& [name, value] : env->entries) {
          const std::string path = join("agent.env", name);
          if (!detail::is_env_name(name)) {
            w_.error(*value, path, "environment variable name must match ^[A-Z_][A-Z0-9_]*$");
            continue;
          }
          if (auto s = w_.string(*value, path)) {
            a.env[name] = *s;
            a.env_marks[name] = value->mark;
          }
        }
      }
    }
  }

  void parse_tools(const YNode& n, std::vector<Tool>& tools) {
    auto f = w_.fields(n, "tools", {}, /*any_keys=*/true);
    if (!f) return;
    // Skip duplicates (already reported): only the first definition counts. A hash set,
    // not Fields::get, so that a pack with many tools is parsed in linear time.
    std::unordered_set<std::string_view> seen;
    seen.reserve(n.map_size());
    for (std::size_t i = 0; i < n.map_size(); ++i) {
      const YNode& key = n.key(i);
      if (key.kind != Kind::scalar) continue;
      if (!seen.insert(key.value).second) continue;
      const std::string path = join("tools", key.value);
      if (!detail::is_item_name(key.value)) {
        w_.error(key, path, "tool name must match ^[a-z][a-z0-9_-]{0,62}$");
        continue;
      }
      parse_tool(key.value, n.val(i), path, tools);
    }
  }

  void parse_tool(const std::string& name, const YNode& n, const std::string& path, std::vector<Tool>& tools) {
    auto f = w_.fields(n, path, {"kind", "url", "path", "side_effect"});
    if (!f) return;
    Tool t;
    t.name = name;
    t.key_path = path;
    t.mark = n.mark;
    bool ok = true;
    const YNode* kind = w_.required(*f, "kind");
    if (kind == nullptr) return;
    auto ks = w_.string(*kind, join(path, "kind"));
    if (!ks) return;
    auto k = tool_kind_from_string(*ks);
    if (!k) {
      w_.error(*kind, join(path, "kind"), "unknown tool kind " + quote(*ks) + " (" + kToolKinds + ")");
      return;
    }
    t.kind = *k;
    const YNode* url = f->get("url");
    const YNode* fpath = f->get("path");
    const YNode* side = f->get("side_effect");
    const std::string kind_name = to_string(t.kind);
    if (is_http_kind(t.kind)) {
      if (fpath != nullptr) w_.error(*fpath, join(path, "path"), "not allowed for " + kind_name + " (use url)"), ok = false;
      if (const YNode* v = w_.required(*f, "url")) {
        t.url_mark = v->mark;
        if (auto s = w_.string(*v, join(path, "url"))) {
          std::string why;
          t.url = *s;
          t.target = detail::parse_tool_url(*s, why);
          if (!t.target) w_.error(*v, join(path, "url"), why), ok = false;
        } else {
          ok = false;
        }
      } else {
        ok = false;
      }
    } else if (is_fs_kind(t.kind)) {
      if (url != nullptr) w_.error(*url, join(path, "url"), "not allowed for " + kind_name + " (use path)"), ok = false;
      if (const YNode* v = w_.required(*f, "path")) {
        t.path_mark = v->mark;
        if (auto s = w_.string(*v, join(path, "path"))) {
          if (is_normalised_absolute(*s)) {
            t.path = *s;
          } else {
            w_.error(*v, join(path, "path"),
                     "must be an absolute, normalised sandbox path (no '..', '.', '//' or trailing '/')");
            ok = false;
          }
        } else {
          ok = false;
        }
      } else {
        ok = false;
      }
    } else {  // custom
      if (url != nullptr) w_.error(*url, join(path, "url"), "not allowed for custom tools"), ok = false;
      if (fpath != nullptr) w_.error(*fpath, join(path, "path"), "not allowed for custom tools"), ok = false;
    }
    if (t.kind == ToolKind::custom) {
      if (const YNode* v = f->get("side_effect")) {
        t.side_effect = w_.boolean(*v, join(path, "side_effect"));
        if (!t.side_effect) ok = false;
      } else {
        w_.error(n.mark, join(path, "side_effect"), "required for custom tools (true or false)");
        ok = false;
      }
    } else if (side != nullptr) {
      w_.error(*side, join(path, "side_effect"), "only allowed for custom tools (" + kind_name + " has a fixed side effect)");
      ok = false;
    }
    (void)ok;  // a tool with errors is still recorded so that examples may name it
    tools.push_back(std::move(t));
  }

  void parse_capabilities(const YNode& n, Capabilities& c) {
    auto f = w_.fields(n, "capabilities", {"egress", "fs", "determinism_tier"});
    if (!f) return;
    if (const YNode* v = w_.required(*f, "determinism_tier")) {
      c.tier_mark = v->mark;
      if (auto s = w_.string(*v, "capabilities.determinism_tier")) {
        if (auto t = tier_from_string(*s)) {
          c.tier = *t;
          tier_ok_ = true;
        } else {
          w_.error(*v, "capabilities.determinism_tier",
                   "unknown tier " + quote(*s) + " (read-only, side-effect or unrestricted)");
        }
      }
    }
    if (const YNode* v = f->get("egress")) parse_egress(*v, c);
    if (const YNode* v = f->get("fs")) {
      if (auto fs = w_.fields(*v, "capabilities.fs", {"read", "write"})) {
        if (const YNode* r = fs->get("read")) parse_fs_list(*r, "capabilities.fs.read", c.fs_read);
        if (const YNode* wr = fs->get("write")) parse_fs_list(*wr, "capabilities.fs.write", c.fs_write);
      }
    }
    for (const FsPath& p : c.fs_write) {
      if (path_covers(p.path, "/workdir")) {
        w_.error(p.mark, p.key_path, "/workdir is the pack and is never writable; list a sub-path such as /workdir/out");
      }
    }
  }

  void parse_egress(const YNode& n, Capabilities& c) {
    const std::string path = "capabilities.egress";
    c.egress_mark = n.mark;
    static constexpr const char* kShape = "must be a list of {host, port, protocol} entries, or \"*\"";
    if (n.kind == Kind::scalar) {
      if (n.value == "*") {
        c.egress_any = true;
      } else {
        w_.error(n, path, kShape);
      }
      return;
    }
    if (n.kind != Kind::sequence) {
      w_.error(n, path, std::string(kShape) + ", got " + describe(n));
      return;
    }
    if (n.items.size() == 1 && n.items[0].kind == Kind::scalar && n.items[0].value == "*") {
      c.egress_any = true;
      return;
    }
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const YNode& item = n.items[i];
      const std::string ipath = index(path, i);
      if (item.kind == Kind::scalar && item.value == "*") {
        w_.error(item, ipath, "\"*\" must be the only egress entry (egress: \"*\" means any destination)");
        continue;
      }
      auto f = w_.fields(item, ipath, {"host", "port", "protocol", "http"});
      if (!f) continue;
      EgressEntry e;
      e.key_path = ipath;
      e.mark = item.mark;
      bool ok = true;
      const YNode* host = w_.required(*f, "host");
      const YNode* port = w_.required(*f, "port");
      const YNode* proto = w_.required(*f, "protocol");
      ok = host != nullptr && port != nullptr && proto != nullptr;
      bool proto_known = false;
      if (host != nullptr) {
        if (auto s = w_.string(*host, join(ipath, "host"))) {
          if (auto h = detail::normalise_host(*s, /*allow_wildcard=*/true)) {
            e.host = *h;
          } else {
            w_.error(*host, join(ipath, "host"),
                     quote(*s) + " must be a DNS name, a leading *. wildcard (*.example.com) or an IP literal");
            ok = false;
          }
        } else {
          ok = false;
        }
      }
      if (port != nullptr) {
        if (auto p = w_.integer(*port, join(ipath, "port"), 1, 65535)) {
          e.port = static_cast<uint16_t>(*p);
        } else {
          ok = false;
        }
      }
      if (proto != nullptr) {
        if (auto s = w_.string(*proto, join(ipath, "protocol"))) {
          if (auto p = protocol_from_string(*s)) {
            e.protocol = *p;
            proto_known = true;
          } else {
            w_.error(*proto, join(ipath, "protocol"),
                     "unknown protocol " + quote(*s) + " (https, http, tcp, udp or moon-proxy)");
            ok = false;
          }
        } else {
          ok = false;
        }
      }
      if (ok && e.protocol == Protocol::moon_proxy && (e.host != "moon" || e.port != 3128)) {
        w_.error(item, ipath, "protocol moon-proxy requires host \"moon\" and port 3128");
        ok = false;
      }
      if (const YNode* http = f->get("http")) {
        // M8: request rules need the gateway to read the requests: https and http only.
        if (proto_known && e.protocol != Protocol::https && e.protocol != Protocol::http) {
          w_.error(*http, join(ipath, "http"),
                   std::string("http rules apply to https and http entries only, not ") + to_string(e.protocol));
          ok = false;
        } else if (!detail::parse_http_rules(w_, *http, join(ipath, "http"), e.http)) {
          ok = false;
        }
      }
      if (ok) c.egress.push_back(std::move(e));
    }
  }

  void parse_fs_list(const YNode& n, const std::string& path, std::vector<FsPath>& out) {
    if (n.kind != Kind::sequence) {
      w_.error(n, path, std::string("must be a list of absolute paths, got ") + describe(n));
      return;
    }
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const std::string ipath = index(path, i);
      auto s = w_.string(n.items[i], ipath);
      if (!s) continue;
      if (!is_normalised_absolute(*s)) {
        w_.error(n.items[i], ipath, "must be an absolute, normalised sandbox path (no '..', '.', '//' or trailing '/')");
        continue;
      }
      out.push_back(FsPath{*s, ipath, n.items[i].mark});
    }
  }

  void parse_resources(const YNode& n, Resources& r) {
    auto f = w_.fields(n, "resources", {"memory", "pids", "timeout", "grace", "write_quota", "open_files"});
    if (!f) return;
    auto size = [&](const char* key, uint64_t min, uint64_t& out) {
      const YNode* v = f->get(key);
      if (v == nullptr) return;
      const std::string path = join("resources", key);
      auto s = w_.string(*v, path);
      if (!s) return;
      auto bytes = detail::parse_size(*s);
      if (!bytes) {
        w_.error(*v, path, "must be a size like 512Mi, 1Gi, 100M or a number of bytes");
      } else if (*bytes < min) {
        w_.error(*v, path, "must be at least " + std::to_string(min) + " bytes");
      } else if (*bytes > (1ULL << 50)) {
        w_.error(*v, path, "must be at most 1Pi");
      } else {
        out = *bytes;
      }
    };
    size("memory", 1ULL << 20, r.memory_bytes);
    size("write_quota", 0, r.write_quota_bytes);
    if (const YNode* v = f->get("pids")) {
      if (auto p = w_.integer(*v, "resources.pids", 1, 32768)) r.pids = static_cast<uint32_t>(*p);
    }
    if (const YNode* v = f->get("open_files")) {
      if (auto p = w_.integer(*v, "resources.open_files", 16, 1048576)) r.open_files = static_cast<uint32_t>(*p);
    }
    if (const YNode* v = f->get("timeout")) {
      if (auto s = w_.string(*v, "resources.timeout")) {
        auto ms = detail::parse_duration_ms(*s);
        if (!ms || *ms == 0) {
          w_.error(*v, "resources.timeout", "must be a positive duration like 60s, 5m, 1h or 1500ms");
        } else if (*ms > 24ULL * 3'600'000) {
          w_.error(*v, "resources.timeout", "must be at most 24h");
        } else {
          r.timeout_ms = *ms;
        }
      }
    }
    // SIGTERM -> SIGKILL delay on a timeout or an interruption (C9); 0s: SIGKILL at once.
    if (const YNode* v = f->get("grace")) {
      if (auto s = w_.string(*v, "resources.grace")) {
        auto ms = detail::parse_duration_ms(*s);
        if (!ms) {
          w_.error(*v, "resources.grace", "must be a duration like 5s, 1500ms or 0s");
        } else if (*ms > 3'600'000) {
          w_.error(*v, "resources.grace", "must be at most 1h");
        } else {
          r.grace_ms = *ms;
        }
      }
    }
  }

  void parse_examples(const YNode& n, Manifest& m) {
    if (n.kind != Kind::sequence) {
      w_.error(n, "examples", std::string("must be a list, got ") + describe(n));
      return;
    }
    // Hash sets keep this linear in tools + examples (packs may be generated and large).
    std::unordered_set<std::string_view> tool_names;
    tool_names.reserve(m.tools.size());
    for (const Tool& t : m.tools) tool_names.insert(t.name);
    std::unordered_set<std::string> example_names;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const YNode& item = n.items[i];
      const std::string path = index("examples", i);
      auto f = w_.fields(item, path, {"name", "input", "args", "tools", "expect"});
      if (!f) continue;
      Example ex;
      ex.key_path = path;
      ex.mark = item.mark;
      if (const YNode* v = w_.required(*f, "name")) {
        if (auto s = w_.string(*v, join(path, "name"))) {
          if (!detail::is_item_name(*s)) {
            w_.error(*v, join(path, "name"), quote(*s) + " must match ^[a-z][a-z0-9_-]{0,62}$");
          } else if (!example_names.insert(*s).second) {
            w_.error(*v, join(path, "name"), "duplicate example name " + quote(*s));
          } else {
            ex.name = *s;
          }
        }
      }
      if (const YNode* v = f->get("input")) {
        ex.input_mark = v->mark;
        if (auto s = w_.string(*v, join(path, "input"))) {
          if (detail::is_normalised_relative(*s)) {
            ex.input = *s;
          } else {
            w_.error(*v, join(path, "input"),
                     "must be a relative path inside the pack (no leading '/', no '..' or '.', no trailing '/')");
          }
        }
      }
      if (const YNode* v = f->get("args")) ex.args = w_.string_list(*v, join(path, "args"), &ex.arg_marks);
      if (const YNode* v = f->get("tools")) {
        const std::string tpath = join(path, "tools");
        if (v->kind != Kind::sequence) {
          w_.error(*v, tpath, std::string("must be a list of tool names, got ") + describe(*v));
        } else {
          for (std::size_t j = 0; j < v->items.size(); ++j) {
            auto s = w_.string(v->items[j], index(tpath, j));
            if (!s) continue;
            if (tool_names.count(*s) == 0) {
              w_.error(v->items[j], index(tpath, j), "names no tool declared under tools: " + quote(*s));
              continue;
            }
            ex.tools.push_back(*s);
          }
        }
      }
      if (const YNode* v = f->get("expect")) parse_expect(*v, join(path, "expect"), ex.expect);
      m.examples.push_back(std::move(ex));
    }
  }

  void parse_expect(const YNode& n, const std::string& path, Expect& e) {
    auto f = w_.fields(n, path, {"exit_code", "stdout_contains", "outputs"});
    if (!f) return;
    if (const YNode* v = f->get("exit_code")) {
      if (auto c = w_.integer(*v, join(path, "exit_code"), 0, 255)) e.exit_code = static_cast<int>(*c);
    }
    if (const YNode* v = f->get("stdout_contains")) e.stdout_contains = w_.string(*v, join(path, "stdout_contains"));
    if (const YNode* v = f->get("outputs")) {
      const std::string opath = join(path, "outputs");
      if (v->kind != Kind::sequence) {
        w_.error(*v, opath, std::string("must be a list of paths relative to /workdir/out, got ") + describe(*v));
        return;
      }
      for (std::size_t j = 0; j < v->items.size(); ++j) {
        auto s = w_.string(v->items[j], index(opath, j));
        if (!s) continue;
        if (!detail::is_normalised_relative(*s)) {
          w_.error(v->items[j], index(opath, j),
                   "must be a relative, normalised path under /workdir/out (no leading '/', no '..')");
          continue;
        }
        e.outputs.push_back(*s);
      }
    }
  }

  // M6: tier coherence.
  void check_tiers(const Manifest& m) {
    if (!tier_ok_) return;
    const Capabilities& c = m.capabilities;
    if (c.egress_any && c.tier != Tier::unrestricted) {
      w_.error(c.egress_mark, "capabilities.egress",
               std::string("\"*\" (any destination) requires determinism_tier: unrestricted, not ") + to_string(c.tier));
    }
    if (c.tier != Tier::read_only) return;
    for (const Tool& t : m.tools) {
      if (!tool_has_side_effect(t)) continue;
      std::string what = to_string(t.kind);
      if (t.kind == ToolKind::fs_write) what += " outside /workdir/out";
      if (t.kind == ToolKind::custom) what += " with side_effect: true";
      w_.error(t.mark, t.key_path,
               "side-effect tool (" + what + ") in a read-only pack; declare determinism_tier: side-effect");
    }
    for (const FsPath& p : c.fs_write) {
      // M6: private scratch paths (the Comet's own tmpfs, discarded) are allowed in every tier.
      if (!path_covers("/workdir/out", p.path) && !path_covers(p.path, "/workdir") && !is_private_scratch(p.path)) {
        w_.error(p.mark, p.key_path,
                 "read-only packs may only write under /workdir/out or to private scratch paths outside /workdir "
                 "(such as /tmp)");
      }
    }
  }
};

}  // namespace

bool tool_has_side_effect(const Tool& t) {
  switch (t.kind) {
    case ToolKind::http_post:
    case ToolKind::http_put:
    case ToolKind::http_patch:
    case ToolKind::http_delete: return true;
    case ToolKind::fs_write: return !path_covers("/workdir/out", t.path);
    case ToolKind::custom: return t.side_effect.value_or(false);
    case ToolKind::http_get:
    case ToolKind::llm:
    case ToolKind::fs_read: return false;
  }
  return false;
}

LoadResult parse_manifest(std::string_view text, const std::string& file) {
  LoadResult result;
  if (text.size() > kMaxManifestBytes) {
    result.errors.push_back(Diagnostic{file, {}, "",
                                       "file is larger than " + std::to_string(kMaxManifestBytes) +
                                           " bytes (" + std::to_string(text.size()) + " bytes)"});
    return result;
  }
  try {
    auto yaml = detail::parse_yaml(text, file);
    if (!yaml.root) {
      result.errors = std::move(yaml.errors);
      return result;
    }
    Manifest m;
    m.file = file;
    ManifestParser(file, result.errors).parse(*yaml.root, m);
    std::stable_sort(result.errors.begin(), result.errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.mark.line, a.mark.column) < std::pair(b.mark.line, b.mark.column);
    });
    if (result.errors.empty()) result.manifest = std::move(m);
  } catch (const std::exception& e) {
    // Defensive: nothing below is expected to throw except on allocation failure.
    result.manifest.reset();
    result.errors.push_back(Diagnostic{file, {}, "", std::string("internal error while parsing: ") + e.what()});
  }
  return result;
}

}  // namespace soyaos::manifest
