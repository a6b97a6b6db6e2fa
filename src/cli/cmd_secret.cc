// `soyaos secret set NAME` (the value from stdin, never argv), `secret ls` (names and set
// times, never values), `secret rm NAME`: the Moon's secret store (moon/secret_store.h,
// SPEC.md C11, docs/secrets.md).
#include <cstdio>
#include <ctime>
#include <memory>

#include "cli/commands.h"
#include "cli/hidden_input.h"
#include "cli/print_error.h"
#include "moon/secret_store.h"
#include "moon/store.h"

namespace soyaos::cli {
namespace {

std::string utc(int64_t t) {
  const auto tt = static_cast<std::time_t>(t);
  std::tm tm{};
  (void)::gmtime_r(&tt, &tm);
  char buf[32];
  (void)std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int set(const std::string& name) {
  auto home = moon::default_home();
  if (!home) {
    print_error("secret set", home.error());
    return 1;
  }
  if (!moon::SecretStore::valid_name(name)) {
    std::fprintf(stderr, "soyaos secret set: the name must match ^[A-Z_][A-Z0-9_]*$\n");
    return kExitUsage;
  }
  auto value = read_hidden_stdin("Value for " + name + " (not echoed, end with Enter): ");
  if (!value) {
    print_error("secret set", name + ": " + value.error().describe());
    return 1;
  }
  if (value->empty()) {
    std::fprintf(stderr, "soyaos secret set %s: the value is empty (nothing read from stdin); nothing stored\n",
                 name.c_str());
    return 1;
  }
  const moon::SecretStore store(*home);
  if (auto s = store.set(name, *value); !s) {
    print_error("secret set", name + ": " + s.error().describe());
    return 1;
  }
  std::fprintf(stderr, "soyaos: secret %s stored (%zu bytes) in %s\n", name.c_str(), value->size(),
               store.dir().c_str());
  return 0;
}

int ls(bool json) {
  auto home = moon::default_home();
  if (!home) {
    print_error("secret ls", home.error());
    return 1;
  }
  auto entries = moon::SecretStore(*home).list();
  if (!entries) {
    print_error("secret ls", entries.error());
    return 1;
  }
  std::string out;
  if (json) {
    out = "[";
    for (std::size_t i = 0; i < entries->size(); ++i) {
      const auto& e = (*entries)[i];
      // Names are ^[A-Z_][A-Z0-9_]*$: nothing to escape.
      out += (i == 0 ? "" : ",") + std::string("{\"name\":\"") + e.name + "\",\"set\":\"" + utc(e.set_time) + "\"}";
    }
    out += "]\n";
  } else {
    for (const auto& e : *entries) out += e.name + "  " + utc(e.set_time) + "\n";
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) return 1;
  return 0;
}

int rm(const std::string& name) {
  auto home = moon::default_home();
  if (!home) {
    print_error("secret rm", home.error());
    return 1;
  }
  if (!moon::SecretStore::valid_name(name)) {
    std::fprintf(stderr, "soyaos secret rm: the name must match ^[A-Z_][A-Z0-9_]*$\n");
    return kExitUsage;
  }
  auto removed = moon::SecretStore(*home).remove(name);
  if (!removed) {
    print_error("secret rm", name + ": " + removed.error().describe());
    return 1;
  }
  if (!*removed) {
    std::fprintf(stderr, "soyaos secret rm: no secret %s in the store\n", name.c_str());
    return 1;
  }
  std::fprintf(stderr, "soyaos: secret %s removed\n", name.c_str());
  return 0;
}

}  // namespace

void register_secret_commands(Command app, CliContext& ctx) {
  auto group = app.add_subcommand("secret", "The Moon's secret store: values for the secrets packs declare");
  group.require_subcommand(1);
  auto name = std::make_shared<std::string>();
  auto set_cmd = group.add_subcommand(
      "set", "Store a secret: the value is read from stdin (never from the command line); one trailing newline is "
             "dropped");
  set_cmd.add_option("name", *name, "Secret name (^[A-Z_][A-Z0-9_]*$)").required();
  set_cmd.callback([name, &ctx] { ctx.exit_code = set(*name); });
  auto json = std::make_shared<bool>(false);
  auto ls_cmd = group.add_subcommand("ls", "List stored secrets: names and when each was set, never values");
  ls_cmd.add_flag("--json", *json, "JSON array of {name, set} on stdout");
  ls_cmd.callback([json, &ctx] { ctx.exit_code = ls(*json); });
  auto rm_name = std::make_shared<std::string>();
  auto rm_cmd = group.add_subcommand("rm", "Remove a stored secret");
  rm_cmd.add_option("name", *rm_name, "Secret name").required();
  rm_cmd.callback([rm_name, &ctx] { ctx.exit_code = rm(*rm_name); });
}

}  // namespace soyaos::cli
