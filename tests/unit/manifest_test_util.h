// Helpers shared by the manifest_*_test.cc files.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::manifest::testing {

// A valid manifest; tests derive invalid ones with with(). Line numbers matter: tests
// assert them.
inline const std::string kValid =
    "soyapack: v0\n"                        // 1
    "name: demo\n"                          // 2
    "version: 1.2.3\n"                      // 3
    "agent:\n"                              // 4
    "  runtime: python3\n"                  // 5
    "  entrypoint: main.py\n"               // 6
    "tools:\n"                              // 7
    "  fetch:\n"                            // 8
    "    kind: builtin.http_get\n"          // 9
    "    url: https://api.example.com/v1\n" // 10
    "capabilities:\n"                       // 11
    "  egress:\n"                           // 12
    "    - host: api.example.com\n"         // 13
    "      port: 443\n"                     // 14
    "      protocol: https\n"               // 15
    "  fs:\n"                               // 16
    "    read: [/workdir]\n"                // 17
    "    write: [/workdir/out]\n"           // 18
    "  determinism_tier: read-only\n";      // 19

// kValid with the first occurrence of `from` replaced by `to` (which must exist).
inline std::string with(const std::string& from, const std::string& to, const std::string& base = kValid) {
  const auto at = base.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture text not found: " << from;
  if (at == std::string::npos) return base;
  std::string out = base;
  out.replace(at, from.size(), to);
  return out;
}

inline LoadResult parse(const std::string& text) { return parse_manifest(text, "soyapack.yaml"); }

inline std::string dump(const LoadResult& r) {
  std::string out;
  for (const auto& d : r.errors) out += d.format() + "\n";
  return out;
}

// The error for `key_path`, or nullptr.
inline const Diagnostic* find_error(const LoadResult& r, const std::string& key_path) {
  for (const auto& d : r.errors) {
    if (d.key_path == key_path) return &d;
  }
  return nullptr;
}

// Asserts that parsing fails with an error at `key_path`, `line`:`column` whose message
// contains `fragment`.
inline ::testing::AssertionResult HasError(const LoadResult& r, const std::string& key_path, int line, int column,
                                           const std::string& fragment = "") {
  if (r.manifest) return ::testing::AssertionFailure() << "manifest unexpectedly valid";
  const Diagnostic* d = find_error(r, key_path);
  if (d == nullptr) return ::testing::AssertionFailure() << "no error at " << key_path << "; got:\n" << dump(r);
  if (d->mark.line != line || d->mark.column != column) {
    return ::testing::AssertionFailure() << "error at " << key_path << " is at " << d->mark.line << ":"
                                         << d->mark.column << ", expected " << line << ":" << column << "\n"
                                         << dump(r);
  }
  if (d->message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << d->message << "\" lacks \"" << fragment << "\"";
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult IsValid(const LoadResult& r) {
  if (r.manifest && r.errors.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected valid, got:\n" << dump(r);
}

}  // namespace soyaos::manifest::testing
