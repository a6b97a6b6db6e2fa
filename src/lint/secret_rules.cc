// SP120 and SP121, and the credential heuristics (docs/lint-rules.md, docs/secrets.md).
// A finding never repeats the literal it is about: lint output lands in CI logs and
// terminals, where a leaked key would be one more copy.
#include "lint/secret_rules.h"

#include <array>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace soyaos::lint {
namespace {

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
// The alphabet of tokens, API keys and base64 (standard and URL-safe).
bool is_token_char(char c) { return is_alnum(c) || c == '+' || c == '/' || c == '_' || c == '=' || c == '-'; }
bool is_key_tail_char(char c) { return is_alnum(c) || c == '_' || c == '-'; }

struct Prefix {
  std::string_view prefix;
  std::size_t min_tail;  // characters of [A-Za-z0-9_-] that must follow
  std::string_view what;
};

// Longest first where one prefix starts another ("sk-ant-" before "sk-").
constexpr std::array<Prefix, 19> kPrefixes = {{
    {"sk-ant-", 20, "an Anthropic API key (sk-ant-...)"},
    {"sk-", 20, "an OpenAI-style secret key (sk-...)"},
    {"github_pat_", 20, "a GitHub fine-grained token (github_pat_...)"},
    {"ghp_", 30, "a GitHub token (ghp_...)"},
    {"gho_", 30, "a GitHub OAuth token (gho_...)"},
    {"ghu_", 30, "a GitHub token (ghu_...)"},
    {"ghs_", 30, "a GitHub token (ghs_...)"},
    {"ghr_", 30, "a GitHub refresh token (ghr_...)"},
    {"xoxb-", 10, "a Slack token (xoxb-...)"},
    {"xoxp-", 10, "a Slack token (xoxp-...)"},
    {"xoxa-", 10, "a Slack token (xoxa-...)"},
    {"xoxr-", 10, "a Slack token (xoxr-...)"},
    {"xoxs-", 10, "a Slack token (xoxs-...)"},
    {"glpat-", 20, "a GitLab token (glpat-...)"},
    {"AIza", 35, "a Google API key (AIza...)"},
    {"AKIA", 16, "an AWS access key id (AKIA...)"},
    {"ASIA", 16, "an AWS temporary access key id (ASIA...)"},
    {"hf_", 30, "a Hugging Face token (hf_...)"},
    {"npm_", 36, "an npm token (npm_...)"},
}};

// Letters and digits both in [b, e).
bool letters_and_digits(std::string_view s) {
  bool letter = false, digit = false;
  for (char c : s) {
    letter = letter || is_upper(c) || is_lower(c);
    digit = digit || is_digit(c);
  }
  return letter && digit;
}

std::size_t key_tail(std::string_view s, std::size_t from) {
  std::size_t n = 0;
  while (from + n < s.size() && is_key_tail_char(s[from + n])) ++n;
  return n;
}

// A known prefix at a word boundary, followed by a long enough key-like tail.
std::optional<std::string> prefixed_key(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && is_alnum(s[i - 1])) continue;
    for (const Prefix& p : kPrefixes) {
      if (s.compare(i, p.prefix.size(), p.prefix) != 0) continue;
      const std::size_t at = i + p.prefix.size();
      const std::size_t n = key_tail(s, at);
      if (n < p.min_tail) continue;
      const std::string_view tail = s.substr(at, n);
      // AWS key ids are exactly 16 upper-case letters and digits after the prefix.
      if (p.prefix == "AKIA" || p.prefix == "ASIA") {
        bool ok = n == 16;
        for (char c : tail) ok = ok && (is_upper(c) || is_digit(c));
        if (!ok) continue;
      } else if (!letters_and_digits(tail) && p.prefix.substr(0, 3) != "xox") {
        continue;  // "sk-learn-and-more-words..." is not a key
      }
      return std::string(p.what);
    }
  }
  return std::nullopt;
}

// header.payload.signature, base64url, the header starting "eyJ" ('{"' encoded).
bool has_jwt(std::string_view s) {
  for (std::size_t i = s.find("eyJ"); i != std::string_view::npos; i = s.find("eyJ", i + 1)) {
    if (i > 0 && is_alnum(s[i - 1])) continue;
    std::size_t at = i;
    const std::size_t header = key_tail(s, at);
    if (header < 10 || at + header >= s.size() || s[at + header] != '.') continue;
    at += header + 1;
    const std::size_t payload = key_tail(s, at);
    if (payload < 10 || at + payload >= s.size() || s[at + payload] != '.') continue;
    return true;
  }
  return false;
}

bool has_private_key(std::string_view s) {
  const std::size_t begin = s.find("-----BEGIN ");
  if (begin == std::string_view::npos) return false;
  const std::size_t end = s.find("-----", begin + 11);
  return end != std::string_view::npos && s.substr(begin, end - begin).find("PRIVATE KEY") != std::string_view::npos;
}

// scheme://user:password@host
bool has_url_password(std::string_view s) {
  for (std::size_t i = s.find("://"); i != std::string_view::npos; i = s.find("://", i + 3)) {
    const std::size_t start = i + 3;
    std::size_t end = start;
    while (end < s.size() && s[end] != '/' && s[end] != '@' && s[end] != ' ' && s[end] != '?' && s[end] != '#') ++end;
    if (end >= s.size() || s[end] != '@') continue;
    const std::string_view userinfo = s.substr(start, end - start);
    const std::size_t colon = userinfo.find(':');
    if (colon != std::string_view::npos && colon + 1 < userinfo.size()) return true;
  }
  return false;
}

double shannon_bits(std::string_view s) {
  std::array<std::size_t, 256> counts{};
  for (char c : s) ++counts[static_cast<unsigned char>(c)];
  double h = 0;
  const auto n = static_cast<double>(s.size());
  for (std::size_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / n;
    h -= p * std::log2(p);
  }
  return h;
}

// Share of adjacent letter/digit pairs that change class (upper, lower, digit): random keys
// change often (~0.6 for mixed-case alphanumerics), names like "Mixtral-8x7B-Instruct" or
// "claude-3-5-sonnet-20241022" rarely.
double class_changes(std::string_view s) {
  auto cls = [](char c) { return is_digit(c) ? 1 : is_upper(c) ? 2 : is_lower(c) ? 3 : 0; };
  std::size_t pairs = 0, changes = 0;
  for (std::size_t i = 1; i < s.size(); ++i) {
    const int a = cls(s[i - 1]), b = cls(s[i]);
    if (a == 0 || b == 0) continue;
    ++pairs;
    if (a != b) ++changes;
  }
  return pairs == 0 ? 0.0 : static_cast<double>(changes) / static_cast<double>(pairs);
}

bool high_entropy_token(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (!is_token_char(s[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < s.size() && is_token_char(s[j])) ++j;
    const std::string_view tok = s.substr(i, j - i);
    if (tok.size() >= kCredentialMinLength && letters_and_digits(tok) && shannon_bits(tok) >= kCredentialMinEntropy &&
        class_changes(tok) >= kCredentialMinClassChanges) {
      return true;
    }
    i = j;
  }
  return false;
}

}  // namespace

std::optional<std::string> looks_like_credential(std::string_view text) {
  if (text.size() > 65536) text = text.substr(0, 65536);  // bounded work on generated packs
  if (has_private_key(text)) return "a private key (-----BEGIN ... PRIVATE KEY-----)";
  if (auto p = prefixed_key(text)) return p;
  if (has_jwt(text)) return "a JSON Web Token (eyJ...)";
  if (has_url_password(text)) return "a URL with a password (scheme://user:password@host)";
  if (high_entropy_token(text)) return "a high-entropy token (random-looking, like an API key)";
  return std::nullopt;
}

namespace detail {

void lint_secrets(const manifest::Manifest& m, std::vector<Finding>& out) {
  auto add = [&](std::string_view rule, std::string message, std::string key_path, manifest::Mark mark) {
    const RuleInfo* info = find_rule(rule);
    out.push_back(Finding{std::string(rule), info ? info->severity : Severity::error, std::move(message),
                          std::move(key_path), mark, {}});
  };
  // SP120: every host of a secret covered by an https or http entry (the only ones the
  // gateway can read requests on, and so substitute in).
  for (const manifest::SecretDecl& d : m.secrets) {
    for (std::size_t j = 0; j < d.hosts.size(); ++j) {
      bool covered = false;
      for (const manifest::EgressEntry& e : m.capabilities.egress) {
        if ((e.protocol == manifest::Protocol::https || e.protocol == manifest::Protocol::http) &&
            manifest::host_matches(e.host, d.hosts[j])) {
          covered = true;
          break;
        }
      }
      if (covered) continue;
      const std::string node = fmt::format("{}.hosts[{}]", d.key_path, j);
      add("SP120",
          fmt::format("secrets.{} is bound to `{}` but no https or http capabilities.egress entry covers it", d.name,
                      d.hosts[j]),
          node, j < d.host_marks.size() ? d.host_marks[j] : d.mark);
    }
  }
  // SP121: literals that look like credentials. The message names the kind, never the text.
  auto check = [&](const std::string& text, const std::string& node, manifest::Mark mark) {
    if (auto why = looks_like_credential(text)) {
      add("SP121", fmt::format("{} holds what looks like {}; declare it under secrets: instead", node, *why), node,
          mark);
    }
  };
  for (const auto& [name, value] : m.agent.env) {
    auto mk = m.agent.env_marks.find(name);
    check(value, "agent.env." + name, mk != m.agent.env_marks.end() ? mk->second : m.agent.mark);
  }
  for (std::size_t i = 0; i < m.agent.args.size(); ++i) {
    check(m.agent.args[i], fmt::format("agent.args[{}]", i),
          i < m.agent.arg_marks.size() ? m.agent.arg_marks[i] : m.agent.mark);
  }
  for (const manifest::Example& ex : m.examples) {
    for (std::size_t i = 0; i < ex.args.size(); ++i) {
      check(ex.args[i], fmt::format("{}.args[{}]", ex.key_path, i), i < ex.arg_marks.size() ? ex.arg_marks[i] : ex.mark);
    }
  }
  for (const manifest::Tool& t : m.tools) {
    if (!t.url.empty()) check(t.url, t.key_path + ".url", t.url_mark.line > 0 ? t.url_mark : t.mark);
  }
}

}  // namespace detail
}  // namespace soyaos::lint
