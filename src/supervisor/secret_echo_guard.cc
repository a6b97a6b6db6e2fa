// SecretEchoGuard (secret_echo_guard.h): KMP per value over the data bytes, with the raw
// bytes from the start of the longest partial match held back.

#include "supervisor/secret_echo_guard.h"

#include <algorithm>

namespace soyaos::supervisor {

SecretEchoGuard::SecretEchoGuard(const std::vector<Secret>& secrets) {
  for (const Secret& s : secrets) {
    if (s.value.empty()) continue;
    Pattern p{s.name, s.value, std::vector<size_t>(s.value.size(), 0), 0};
    size_t k = 0;
    for (size_t i = 1; i < s.value.size(); ++i) {
      while (k > 0 && s.value[i] != s.value[k]) k = p.fail[k - 1];
      if (s.value[i] == s.value[k]) ++k;
      p.fail[i] = k;
    }
    longest_ = std::max(longest_, s.value.size());
    starts_[static_cast<uint8_t>(s.value[0])] = true;
    patterns_.push_back(std::move(p));
  }
}

// The last `n` data bytes seen form a value: overwrite those still held (a part released at
// the end of an earlier message is the agent's already).
void SecretEchoGuard::mask_last(size_t n) {
  const size_t have = std::min(n, data_pos_.size());
  for (size_t i = data_pos_.size() - have; i < data_pos_.size(); ++i) held_[data_pos_[i]] = kMask;
}

std::string_view SecretEchoGuard::feed(std::string_view raw, std::span<const network::DataSpan> data,
                                       std::string& out) {
  if (patterns_.empty()) {
    out += raw;
    return {};
  }
  std::string_view first_masked;
  const size_t base = held_.size();
  held_ += raw;
  for (const network::DataSpan& span : data) {
    const size_t end = std::min(span.offset + span.size, raw.size());
    for (size_t j = span.offset; j < end; ++j) {
      if (idle_) {
        // No partial match: skip to the next byte that can begin a value.
        while (j < end && !starts_[static_cast<uint8_t>(raw[j])]) ++j;
        if (j == end) break;
      }
      const char c = raw[j];
      data_pos_.push_back(base + j);
      size_t partial = 0;
      for (Pattern& p : patterns_) {
        size_t q = p.matched;
        while (q > 0 && p.value[q] != c) q = p.fail[q - 1];
        if (p.value[q] == c) ++q;
        if (q == p.value.size()) {
          mask_last(q);
          if (first_masked.empty()) first_masked = p.name;
          q = p.fail[q - 1];
        }
        p.matched = q;
        partial = std::max(partial, q);
      }
      // A byte no partial match covers can be part of no later match either: forget the
      // positions (the common case, so that plain traffic costs one KMP step per secret).
      idle_ = partial == 0;
      if (partial == 0) {
        data_pos_.clear();
      } else if (data_pos_.size() > 2 * longest_) {
        // Only the last `longest_` data positions can ever be masked or held for.
        data_pos_.erase(data_pos_.begin(), data_pos_.end() - static_cast<std::ptrdiff_t>(longest_));
      }
    }
  }
  // Hold the last `longest_ - 1` data bytes of this feed (and what follows them), whatever they
  // are: a value completed by the next feed is then still masked whole. The amount held depends
  // only on how many data bytes came, never on whether they begin a value: a hold that
  // depended on the content would tell an agent whose bytes a host echoes back, by the delay,
  // whether its guess is a prefix of the value (review R2 G1). Fewer data bytes than that in
  // this feed: everything held stays held (release() or the caller's deadline ends it).
  size_t cut = 0;
  size_t seen = 0;
  const size_t keep = longest_ - 1;
  for (auto span = data.rbegin(); span != data.rend() && seen < keep; ++span) {
    const size_t end = std::min(span->offset + span->size, raw.size());
    if (span->offset >= end) continue;
    const size_t take = std::min(keep - seen, end - span->offset);
    seen += take;
    cut = base + end - take;
  }
  if (seen < keep) cut = 0;
  if (keep == 0) cut = held_.size();
  out.append(held_, 0, cut);
  held_.erase(0, cut);
  std::erase_if(data_pos_, [cut](size_t pos) { return pos < cut; });
  for (size_t& pos : data_pos_) pos -= cut;
  return first_masked;
}

std::string_view SecretEchoGuard::feed_data(std::string_view raw, std::string& out) {
  const network::DataSpan all{0, raw.size()};
  return feed(raw, std::span<const network::DataSpan>(&all, 1), out);
}

void SecretEchoGuard::release(std::string& out) {
  out += held_;
  held_.clear();
  data_pos_.clear();
}

}  // namespace soyaos::supervisor
