// The command line as the cmd_*.cc files see it: subcommands, options and flags, without
// CLI11's templates. CLI11 (header-only in Debian) costs ~7 s of compile CPU in every file
// that includes it, mostly instantiating its templates and namespace-scope validators; only
// cli_args.cc includes it, so it is compiled once. Each function here is the CLI11 call of
// the same name with the same argument types, so help texts, type names (TEXT, INT, UINT)
// and validation messages are CLI11's own.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace soyaos::cli {

// One option or flag of a command (a CLI::Option that its App owns). Each call returns the
// option itself, for chaining: `cmd.add_option(...).required()`.
class Option {
 public:
  explicit Option(CLI::Option* option) : option_(option) {}

  Option required();
  // false: one value per occurrence (a vector option would otherwise take the words after it).
  Option allow_extra_args(bool allow);
  // Replaces "TEXT", "INT", ... in the help.
  Option option_text(const std::string& text);
  // CLI::IsMember: the value must be one of these (help shows ":{a,b}").
  Option check_member(std::initializer_list<const char*> values);
  Option check_positive();      // CLI::PositiveNumber
  Option check_non_negative();  // CLI::NonNegativeNumber

 private:
  CLI::Option* option_;
};

// A command or command group (a CLI::App, owned by its parent or by a RootCommand).
class Command {
 public:
  explicit Command(CLI::App* app) : app_(app) {}

  Command add_subcommand(const std::string& name, const std::string& description);
  // The group runs only with this many subcommands named (else a usage error).
  void require_subcommand(int count);
  // Runs after the command line parsed, when this command was named.
  void callback(std::function<void()> run);

  // A positional (NAME) or an option (-x,--name) storing into `into`, which must outlive
  // the parse. The vector forms take every value given (repeatable).
  Option add_option(const std::string& name, std::string& into, const std::string& description);
  Option add_option(const std::string& name, std::vector<std::string>& into, const std::string& description);
  Option add_option(const std::string& name, int& into, const std::string& description);
  Option add_option(const std::string& name, unsigned& into, const std::string& description);
  Option add_option(const std::string& name, std::int64_t& into, const std::string& description);
  Option add_option(const std::string& name, std::uint64_t& into, const std::string& description);
  Option add_flag(const std::string& name, bool& into, const std::string& description);

  // For main.cc's walk of the command tree.
  const std::string& name() const;
  bool check_name(const std::string& word) const;  // `word` names this command
  std::vector<Command> subcommands() const;
  std::optional<Command> parent() const;
  bool operator==(const Command& other) const { return app_ == other.app_; }

 private:
  CLI::App* app_;
};

// The top of the command tree; owns every command and option under it.
class RootCommand {
 public:
  explicit RootCommand(const std::string& description);
  RootCommand(const RootCommand&) = delete;
  RootCommand& operator=(const RootCommand&) = delete;
  ~RootCommand();

  Command command() const { return Command(app_.get()); }
  void set_help_all_flag(const std::string& name, const std::string& description);
  // Parses `words` (the arguments in reverse order, as CLI11 takes them) and runs the
  // named commands' callbacks. nullopt when that happened; else the exit status after
  // CLI11 printed the help (0) or the usage error (`usage_exit`). Exceptions other than
  // CLI11's parse errors (from the callbacks) propagate.
  std::optional<int> parse(std::vector<std::string>& words, int usage_exit);

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace soyaos::cli
