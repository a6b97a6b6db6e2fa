#include "supervisor/http_gate.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "network/http_syntax.h"
#include "policy/http_rules.h"

namespace soyaos::supervisor {
namespace {

GateDecision refuse(GateDecision d, std::string rule, std::string reason) {
  d.allowed = false;
  d.rule = std::move(rule);
  d.reason = std::move(reason);
  d.upstream_head.clear();
  return d;
}

// Bytes a secret's value may have in a field value: field bytes (RFC 9110 5.5), no control
// bytes.
bool fits_field_value(std::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char c) {
    const auto u = static_cast<uint8_t>(c);
    return u == '\t' || u == ' ' || (u >= 0x21 && u != 0x7f);
  });
}

// Whether a request header field carries credentials, the only place a secret's value is put
// (review R1 F1, R2 G2). A value put into the request line or an ordinary field comes back:
// servers quote paths and queries in errors and redirects, echo `Origin` and `X-Request-Id`,
// carry queries in opaque cursors, truncated or encoded where the response guard cannot see
// it. Credential fields are not echoed by APIs: `Authorization` and any field whose name says
// it holds a key, token, secret or password (`x-api-key`, `api-key`, `x-goog-api-key`,
// `private-token`, `x-auth-token`, ...).
bool is_credential_field(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  for (const std::string_view word : {"auth", "key", "token", "secret", "password", "credential"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

// The first bound placeholder in `s`, or nullptr.
const HttpSecretBinding* bound_placeholder_in(std::string_view s, const std::vector<HttpSecretBinding>& secrets) {
  for (const HttpSecretBinding& b : secrets) {
    if (b.bound_to_this_host && !b.placeholder.empty() && s.find(b.placeholder) != std::string_view::npos) return &b;
  }
  return nullptr;
}

// Replaces every bound placeholder in `s`; false (with `why`) when a value cannot stand there.
bool swap_placeholders(std::string& s, const std::vector<HttpSecretBinding>& secrets, std::string* why) {
  for (const HttpSecretBinding& b : secrets) {
    if (!b.bound_to_this_host || b.placeholder.empty()) continue;
    size_t at = s.find(b.placeholder);
    if (at == std::string::npos) continue;
    if (!fits_field_value(b.value)) {
      *why = "the value of the secret behind `" + b.placeholder + "` has bytes a header field cannot carry";
      return false;
    }
    while (at != std::string::npos) {
      s.replace(at, b.placeholder.size(), b.value);
      at = s.find(b.placeholder, at + b.value.size());
    }
  }
  return true;
}

// TRACE in any case: a server that folds the method's case would still echo the request.
bool is_trace(std::string_view method) {
  constexpr std::string_view kTrace = "TRACE";
  return method.size() == kTrace.size() && std::equal(method.begin(), method.end(), kTrace.begin(), [](char a, char b) {
           return (a >= 'a' && a <= 'z' ? static_cast<char>(a - 'a' + 'A') : a) == b;
         });
}

std::string expected_host(const HttpExchangePolicy& p) {
  if (p.host.find(':') != std::string::npos && p.host.front() != '[') return "[" + p.host + "]";
  return p.host;
}

}  // namespace

GateDecision gate_request(const network::HttpHeadParse& parse, const HttpExchangePolicy& policy) {
  GateDecision d;
  const std::string& entry = policy.manifest_entry;
  if (parse.status != network::ParseStatus::complete) {
    return refuse(std::move(d), entry, "not a valid HTTP/1.x request" + (parse.reason.empty() ? "" : ": " + parse.reason));
  }
  const network::HttpHead& h = parse.head;
  d.method = h.method;
  const policy::TargetParts target = policy::split_target(h.target);
  d.path = std::string(target.path.substr(0, 256));
  if (h.target_form == network::TargetForm::absolute || h.target_form == network::TargetForm::authority) {
    return refuse(std::move(d), entry,
                  "a proxy-style request (" + std::string(network::to_string(h.target_form)) +
                      " target): the gateway is not a proxy");
  }
  const std::string want = expected_host(policy);
  if (h.host != want || (h.port && *h.port != policy.port)) {
    return refuse(std::move(d), entry,
                  "Host `" + h.host + (h.port ? ":" + std::to_string(*h.port) : "") + "` does not match `" + want +
                      "`");
  }
  if (std::string why = network::http_entry_refusal(h); !why.empty()) return refuse(std::move(d), entry, why);
  if (!policy.rules.empty()) {
    if (std::string why = network::http_method_override_refusal(h); !why.empty()) {
      return refuse(std::move(d), entry, why);
    }
  }
  // A server that answers TRACE echoes the request it received: with the placeholders swapped,
  // that is the credential, handed back to the agent.
  const bool secret_bound = std::any_of(policy.secrets.begin(), policy.secrets.end(),
                                        [](const HttpSecretBinding& b) { return b.bound_to_this_host; });
  if (secret_bound && is_trace(h.method)) {
    return refuse(std::move(d), entry,
                  "TRACE on an entry with a bound secret (the server's echo of the request would carry its value)");
  }
  const network::RequestTraitsResult traits = network::request_traits(h);
  if (!traits.refusal.empty()) return refuse(std::move(d), entry, traits.refusal);
  d.traits = traits.traits;

  std::string line_target;
  if (h.target_form == network::TargetForm::asterisk) {
    if (!policy.rules.empty()) return refuse(std::move(d), entry, "`OPTIONS *` names no path an http rule can allow");
    line_target = "*";
  } else if (policy.rules.empty()) {
    // No rules: no path is promised or checked, so none is rewritten or refused for its
    // spelling; the target goes up as sent (`%2F` in an npm scope or a GitLab project id,
    // `%25` in a file name, `//` are what real clients send; review R2 G9).
    line_target = h.target;
  } else {
    const policy::NormalisedPath n = policy::normalise_http_path(target.path);
    if (!n.ok()) return refuse(std::move(d), entry, n.reason);
    d.path = n.path;
    const policy::HttpRuleMatch m = policy::match_http_rules(h.method, n.path, policy.rules, entry);
    d.rule = m.rule;
    if (!m.allowed) return refuse(std::move(d), m.rule, m.reason);
    line_target = n.path;
    if (target.has_query) line_target += "?" + std::string(target.query);
  }
  if (d.rule.empty()) d.rule = entry;

  // A placeholder the gateway can read but whose secret is not bound here: someone is trying
  // to send it elsewhere. Refused wherever it is in the head (names included).
  for (const HttpSecretBinding& b : policy.secrets) {
    if (b.bound_to_this_host || b.placeholder.empty()) continue;
    bool found = h.target.find(b.placeholder) != std::string::npos;
    for (const auto& [name, value] : h.fields) {
      found = found || name.find(b.placeholder) != std::string::npos || value.find(b.placeholder) != std::string::npos;
    }
    if (found) {
      return refuse(std::move(d), entry,
                    "a placeholder of a secret that is not bound to " + policy.host + " (`" + b.placeholder + "`)");
    }
  }

  // A bound placeholder anywhere but in a credential field's value would put the value where
  // the server may hand it back: refused, not substituted.
  const std::string where_only = "; a secret's value goes only into a credential header field (Authorization, "
                                 "or a field named for a key, token, secret or password)";
  if (const HttpSecretBinding* b = bound_placeholder_in(h.target, policy.secrets)) {
    return refuse(std::move(d), entry, "the placeholder `" + b->placeholder + "` in the request line" + where_only);
  }
  for (const auto& [name, value] : h.fields) {
    const HttpSecretBinding* b = bound_placeholder_in(name, policy.secrets);
    if (b == nullptr && !is_credential_field(name)) b = bound_placeholder_in(value, policy.secrets);
    if (b != nullptr) {
      return refuse(std::move(d), entry,
                    "the placeholder `" + b->placeholder + "` in the field `" + name + "`" + where_only);
    }
  }

  std::string why;
  std::string out;
  out.reserve(h.head_size + 256);
  out += h.method;
  out += ' ';
  out += line_target;
  out += h.minor_version == 0 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
  // The response must come back scannable (SecretEchoGuard reads identity bytes only).
  const bool identity_only = std::any_of(policy.secrets.begin(), policy.secrets.end(),
                                         [](const HttpSecretBinding& b) { return b.bound_to_this_host; });
  for (const auto& [name, value] : h.fields) {
    if (identity_only && network::http_syntax::iequals(name, "accept-encoding")) continue;
    std::string v = value;
    if (is_credential_field(name) && !swap_placeholders(v, policy.secrets, &why)) {
      return refuse(std::move(d), entry, why);
    }
    out += name;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  if (identity_only) out += "accept-encoding: identity\r\n";
  out += "\r\n";
  d.upstream_head = std::move(out);
  d.allowed = true;
  return d;
}

std::string denied_response(const std::string& rule, const std::string& reason, std::string_view status_line) {
  const nlohmann::ordered_json body_json = {{"error", "soyaos_denied"}, {"rule", rule}, {"reason", reason}};
  const std::string body = body_json.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + "\n";
  // The header carries the rule's key path only: built from the manifest's keys, it has no
  // byte a field value cannot hold; the reason (which may quote the agent's bytes) is in the
  // JSON body, escaped.
  std::string header_rule;
  for (char c : rule) {
    const auto u = static_cast<uint8_t>(c);
    header_rule += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return "HTTP/1.1 " + std::string(status_line) + "\r\nx-soyaos-denied: " + header_rule +
         "\r\ncontent-type: application/json\r\ncontent-length: " + std::to_string(body.size()) +
         "\r\nconnection: close\r\n\r\n" + body;
}

}  // namespace soyaos::supervisor
