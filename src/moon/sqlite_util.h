// The SQLite pieces the Moon's two databases share (moon.db in store.cc, the result
// cache's index.db in cache.cc): a prepared statement finalized on scope exit, and a
// BEGIN IMMEDIATE transaction rolled back unless committed. How an error is worded (and
// whether corruption is diagnosed with quick_check) stays with each database.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"

namespace soyaos::moon::detail {

class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  Stmt& bind_opt(int i, const std::string* v) { return v != nullptr ? bind(i, *v) : bind_null(i); }
  // Text SQLite does not copy: `v` must stay valid until the statement is reset.
  Stmt& bind_static(int i, std::string_view v) {
    // A null pointer would bind NULL: an empty view is the empty text.
    sqlite3_bind_text(s_, i, v.data() != nullptr ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
    return *this;
  }
  // bind_static, or NULL when `v` is empty.
  Stmt& bind_static_or_null(int i, std::string_view v) { return v.empty() ? bind_null(i) : bind_static(i, v); }
  int step() { return sqlite3_step(s_); }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string text(int col) {
    const auto* p = sqlite3_column_text(s_, col);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, col)));
  }
  int64_t integer(int col) { return sqlite3_column_int64(s_, col); }

 private:
  sqlite3_stmt* s_;
};

// Runs SQL without results; each database words its own errors.
using ExecFn = Status (*)(sqlite3* db, const std::filesystem::path& where, const char* sql, const std::string& what);

// A write transaction (BEGIN IMMEDIATE), rolled back unless committed.
class Txn {
 public:
  // `begin_what` / `commit_what` name the step in an error message.
  Txn(sqlite3* db, const std::filesystem::path& where, ExecFn exec, const char* begin_what, const char* commit_what)
      : db_(db), where_(where), exec_(exec), begin_what_(begin_what), commit_what_(commit_what) {}
  Status begin() {
    auto s = exec_(db_, where_, "BEGIN IMMEDIATE", begin_what_);
    open_ = s.ok();
    return s;
  }
  Status commit() {
    auto s = exec_(db_, where_, "COMMIT", commit_what_);
    if (s) open_ = false;
    return s;
  }
  ~Txn() {
    if (open_) (void)sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

 private:
  sqlite3* db_;
  const std::filesystem::path& where_;
  ExecFn exec_;
  const char* begin_what_;
  const char* commit_what_;
  bool open_ = false;
};

}  // namespace soyaos::moon::detail
