#include "cli/run_secrets.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "cli/commands.h"
#include "common/unique_fd.h"
#include "moon/secret_store.h"
#include "supervisor/run.h"

namespace soyaos::cli {

Result<SecretSource> parse_secret_arg(const std::string& arg) {
  SecretSource s;
  const auto eq = arg.find('=');
  s.name = arg.substr(0, eq);
  if (!moon::SecretStore::valid_name(s.name)) {
    return make_error("--secret " + arg.substr(0, 64) + ": the name must match ^[A-Z_][A-Z0-9_]*$");
  }
  if (eq == std::string::npos) {
    s.kind = SecretSource::Kind::operator_env;
    s.ref = s.name;
    return s;
  }
  const std::string from = arg.substr(eq + 1);
  if (from.rfind("env:", 0) == 0) {
    s.kind = SecretSource::Kind::env;
    s.ref = from.substr(4);
    if (s.ref.empty()) return make_error("--secret " + s.name + "=env:VAR: the variable name is missing");
    return s;
  }
  if (from.rfind("file:", 0) == 0) {
    s.kind = SecretSource::Kind::file;
    s.ref = from.substr(5);
    if (s.ref.empty()) return make_error("--secret " + s.name + "=file:PATH: the path is missing");
    return s;
  }
  // Never echo what followed '=': it may well be the value itself.
  return make_error("--secret " + s.name +
                    "=...: give NAME (from your environment variable NAME), NAME=env:VAR or NAME=file:PATH; a value "
                    "on the command line is not accepted (other users see it in ps, and shell history keeps it)");
}

namespace {

std::string how_to_supply(const std::string& name) {
  return "supply it with --secret " + name + " (from your environment variable " + name + "), --secret " + name +
         "=env:VAR or --secret " + name + "=file:PATH, or store it once with `soyaos secret set " + name + "`";
}

// The value of one source; an error message names the source, never the value.
Result<SecretBytes> read_source(const SecretSource& s) {
  if (s.kind == SecretSource::Kind::file) {
    UniqueFd fd(::open(s.ref.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) return errno_error("--secret " + s.name + "=file:" + s.ref);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return errno_error("--secret " + s.name + "=file:" + s.ref);
    if (!S_ISREG(st.st_mode)) return make_error("--secret " + s.name + "=file:" + s.ref + ": not a regular file");
    auto v = SecretBytes::read_all(fd.get(), "--secret " + s.name + "=file:" + s.ref);
    if (!v) return v.error();
    v->drop_trailing_newline();  // C11: an editor's final newline is not part of the value
    return v;
  }
  const char* value = std::getenv(s.ref.c_str());
  if (value == nullptr) {
    return make_error(s.kind == SecretSource::Kind::operator_env
                          ? "--secret " + s.name + ": your environment has no variable " + s.ref
                          : "--secret " + s.name + "=env:" + s.ref + ": your environment has no variable " + s.ref);
  }
  return SecretBytes::copy_of(value);
}

}  // namespace

SecretResolution resolve_secrets(const manifest::Manifest& m, const std::vector<std::string>& args,
                                 const std::filesystem::path& home) {
  SecretResolution r;
  std::map<std::string, SecretSource> sources;
  for (const auto& arg : args) {
    auto s = parse_secret_arg(arg);
    if (!s) {
      r.exit_code = kExitUsage;
      r.error = s.error().message;
      return r;
    }
    const bool declared = std::any_of(m.secrets.begin(), m.secrets.end(),
                                      [&](const manifest::SecretDecl& d) { return d.name == s->name; });
    if (!declared) {
      r.exit_code = kExitUsage;
      r.error = "--secret " + s->name + ": the manifest declares no secret " + s->name +
                (m.secrets.empty() ? " (it has no secrets: section)" : "");
      return r;
    }
    if (!sources.emplace(s->name, *s).second) {
      r.exit_code = kExitUsage;
      r.error = "--secret " + s->name + " is given more than once";
      return r;
    }
  }
  const moon::SecretStore store(home);
  for (const manifest::SecretDecl& d : m.secrets) {
    policy::RunSecret rs;
    rs.name = d.name;
    rs.hosts = d.hosts;
    auto fail = [&](const std::string& why) {
      r.exit_code = supervisor::kExitSetup;
      r.error = "secret " + d.name + ": " + why + "; " + how_to_supply(d.name);
      r.secrets.clear();
    };
    if (auto it = sources.find(d.name); it != sources.end()) {
      auto v = read_source(it->second);
      if (!v) {
        fail(v.error().describe());
        return r;
      }
      rs.value = std::move(*v);
    } else {
      auto v = store.get(d.name);
      if (!v) {
        fail(v.error().describe());
        return r;
      }
      if (!v->has_value()) {
        fail("no value (no --secret " + d.name + ", and none in " + store.dir().string() + ")");
        return r;
      }
      rs.value = std::move(**v);
    }
    if (rs.value.empty()) {
      fail("the value is empty");
      return r;
    }
    auto placeholder = policy::new_placeholder();
    if (!placeholder) {
      fail(placeholder.error().describe());
      return r;
    }
    rs.placeholder = std::move(*placeholder);
    r.secrets.push_back(std::move(rs));
  }
  return r;
}

Result<std::vector<policy::RunSecret>> secrets_for_another_run(const std::vector<policy::RunSecret>& secrets) {
  std::vector<policy::RunSecret> out;
  for (const auto& s : secrets) {
    policy::RunSecret copy;
    copy.name = s.name;
    copy.hosts = s.hosts;
    auto value = SecretBytes::copy_of(s.value.view());
    if (!value) return value.error();
    copy.value = std::move(*value);
    auto placeholder = policy::new_placeholder();
    if (!placeholder) return placeholder.error();
    copy.placeholder = std::move(*placeholder);
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace soyaos::cli
