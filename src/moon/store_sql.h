// How moon.db's SQL is run and its errors are worded, shared by every file of the Store
// (store.cc, store_consent.cc, store_flags.cc, store_query.cc): one wording, one corruption diagnosis
// (PRAGMA quick_check named in the error), one way to read rows.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/result.h"
#include "moon/sqlite_util.h"

namespace soyaos::moon::detail {

// "WHAT (PATH): sqlite's message".
Error db_error(sqlite3* db, const std::filesystem::path& path, const std::string& what);
bool is_corruption(int rc);
// The database is corrupt or not SQLite: says so, with what quick_check finds, and how to recover.
Error corrupt_error(sqlite3* db, const std::filesystem::path& path, const std::string& sqlite_msg);
// Runs SQL without results (an ExecFn for Txn).
Status exec(sqlite3* db, const std::filesystem::path& path, const char* sql, const std::string& what);
Result<Stmt> prepare(sqlite3* db, const std::filesystem::path& path, const std::string& sql);
// One step that must not fail (a row or done).
Status step_done(Stmt& s, sqlite3* db, const std::filesystem::path& path, const std::string& what);

// Every row of `st` as `row(st)` gives it; an error (named `what`) when a step fails.
template <class Row>
auto read_rows(Stmt& st, Row row, sqlite3* db, const std::filesystem::path& path, const std::string& what)
    -> Result<std::vector<decltype(row(st))>> {
  std::vector<decltype(row(st))> out;
  int rc = 0;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(row(st));
  if (rc == SQLITE_DONE) return out;
  if (is_corruption(rc)) return corrupt_error(db, path, sqlite3_errmsg(db));
  return db_error(db, path, what);
}

}  // namespace soyaos::moon::detail
