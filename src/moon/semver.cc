#include "moon/semver.h"

#include <algorithm>
#include <vector>

namespace soyaos::moon {
namespace {

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Numeric identifiers without leading zeros: longer is larger, same length compares bytewise.
int compare_numeric(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

int compare_ident(std::string_view a, std::string_view b) {
  const bool na = all_digits(a), nb = all_digits(b);
  if (na && nb) return compare_numeric(a, b);
  if (na != nb) return na ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

}  // namespace

int compare_semver(std::string_view a, std::string_view b) {
  a = a.substr(0, a.find('+'));
  b = b.substr(0, b.find('+'));
  const auto da = a.find('-'), db = b.find('-');
  const std::string_view core_a = a.substr(0, da), core_b = b.substr(0, db);
  const std::string_view pre_a = da == std::string_view::npos ? "" : a.substr(da + 1);
  const std::string_view pre_b = db == std::string_view::npos ? "" : b.substr(db + 1);
  const auto ca = split_dots(core_a), cb = split_dots(core_b);
  for (size_t i = 0; i < std::max(ca.size(), cb.size()); ++i) {
    const std::string_view x = i < ca.size() ? ca[i] : "0", y = i < cb.size() ? cb[i] : "0";
    if (int c = all_digits(x) && all_digits(y) ? compare_numeric(x, y) : compare_ident(x, y); c != 0) return c;
  }
  if (pre_a.empty() || pre_b.empty()) {
    if (pre_a.empty() && pre_b.empty()) return 0;
    return pre_a.empty() ? 1 : -1;  // a release is newer than its pre-releases
  }
  const auto pa = split_dots(pre_a), pb = split_dots(pre_b);
  for (size_t i = 0; i < std::min(pa.size(), pb.size()); ++i) {
    if (int c = compare_ident(pa[i], pb[i]); c != 0) return c;
  }
  if (pa.size() == pb.size()) return 0;
  return pa.size() < pb.size() ? -1 : 1;
}

}  // namespace soyaos::moon
