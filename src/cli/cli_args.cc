// The only translation unit that includes CLI11 (see cli_args.h): each function forwards
// to the CLI11 call of the same name with the caller's own argument types.
#include "cli/cli_args.h"

#include <CLI/CLI.hpp>

#include <utility>

namespace soyaos::cli {

Option Option::required() {
  option_->required();
  return *this;
}

Option Option::allow_extra_args(bool allow) {
  option_->allow_extra_args(allow);
  return *this;
}

Option Option::option_text(const std::string& text) {
  option_->option_text(text);
  return *this;
}

Option Option::check_member(std::initializer_list<const char*> values) {
  // What CLI::IsMember({"a", "b"}) builds from string literals: a vector of const char*.
  option_->check(CLI::IsMember(std::vector<const char*>(values)));
  return *this;
}

Option Option::check_positive() {
  option_->check(CLI::PositiveNumber);
  return *this;
}

Option Option::check_non_negative() {
  option_->check(CLI::NonNegativeNumber);
  return *this;
}

Command Command::add_subcommand(const std::string& name, const std::string& description) {
  return Command(app_->add_subcommand(name, description));
}

void Command::require_subcommand(int count) { app_->require_subcommand(count); }

void Command::callback(std::function<void()> run) { app_->callback(std::move(run)); }

Option Command::add_option(const std::string& name, std::string& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_option(const std::string& name, std::vector<std::string>& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_option(const std::string& name, int& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_option(const std::string& name, unsigned& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_option(const std::string& name, std::int64_t& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_option(const std::string& name, std::uint64_t& into, const std::string& description) {
  return Option(app_->add_option(name, into, description));
}

Option Command::add_flag(const std::string& name, bool& into, const std::string& description) {
  return Option(app_->add_flag(name, into, description));
}

const std::string& Command::name() const { return app_->get_name(); }

bool Command::check_name(const std::string& word) const { return app_->check_name(word); }

std::vector<Command> Command::subcommands() const {
  std::vector<Command> out;
  for (CLI::App* sub : app_->get_subcommands([](CLI::App*) { return true; })) out.emplace_back(sub);
  return out;
}

std::optional<Command> Command::parent() const {
  CLI::App* up = app_->get_parent();
  if (up == nullptr) return std::nullopt;
  return Command(up);
}

RootCommand::RootCommand(const std::string& description) : app_(std::make_unique<CLI::App>(description)) {}

RootCommand::~RootCommand() = default;

void RootCommand::set_help_all_flag(const std::string& name, const std::string& description) {
  app_->set_help_all_flag(name, description);
}

std::optional<int> RootCommand::parse(std::vector<std::string>& words, int usage_exit) {
  try {
    app_->parse(words);
  } catch (const CLI::CallForHelp& e) {
    return app_->exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app_->exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app_->exit(e);
    return usage_exit;
  }
  return std::nullopt;
}

}  // namespace soyaos::cli
