#include "network/http_syntax.h"

namespace soyaos::network::http_syntax {

bool split_field(std::string_view line, std::string_view* name, std::string_view* value, std::string* why) {
  if (line.empty() || line.front() == ' ' || line.front() == '\t') {
    *why = "obsolete line folding";
    return false;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    *why = "header field without a colon";
    return false;
  }
  *name = line.substr(0, colon);
  if (!is_token(*name)) {
    *why = "header field name is not a token";
    return false;
  }
  const std::string_view raw = line.substr(colon + 1);
  if (!all_field_bytes(raw)) {
    *why = "header field value has a control byte";
    return false;
  }
  *value = trim_ows(raw);
  return true;
}

}  // namespace soyaos::network::http_syntax
