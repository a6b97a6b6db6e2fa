#include "moon/store_sql.h"

namespace soyaos::moon::detail {

namespace fs = std::filesystem;

namespace {

// What PRAGMA quick_check says, for an error message ("" when it cannot run).
std::string quick_check(sqlite3* db) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check(3)", -1, &raw, nullptr) != SQLITE_OK) return "";
  Stmt s(raw);
  std::string out;
  while (s.step() == SQLITE_ROW) out += (out.empty() ? "" : "; ") + s.text(0);
  // One row can span lines ("*** in database main ***\nPage 11: ..."); a problem is one line.
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

}  // namespace

Error db_error(sqlite3* db, const fs::path& path, const std::string& what) {
  return make_error(what + " (" + path.string() + "): " + sqlite3_errmsg(db));
}

bool is_corruption(int rc) {
  rc &= 0xff;
  return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

Error corrupt_error(sqlite3* db, const fs::path& path, const std::string& sqlite_msg) {
  std::string msg = "the Moon database " + path.string() + " is corrupt or not a SQLite database (" + sqlite_msg + ")";
  if (std::string qc = quick_check(db); !qc.empty() && qc != "ok") msg += "; quick_check: " + qc;
  msg += "; move it aside to start a fresh index (blobs under oci/ are kept)";
  return make_error(msg);
}

Status exec(sqlite3* db, const fs::path& path, const char* sql, const std::string& what) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  std::string m = msg != nullptr ? msg : sqlite3_errstr(rc);
  sqlite3_free(msg);
  if (rc == SQLITE_OK) return {};
  if (is_corruption(rc)) return corrupt_error(db, path, m);
  return make_error(what + " (" + path.string() + "): " + m);
}

Result<Stmt> prepare(sqlite3* db, const fs::path& path, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) {
    if (is_corruption(rc)) return corrupt_error(db, path, sqlite3_errmsg(db));
    return db_error(db, path, "prepare query");
  }
  return Stmt(s);
}

Status step_done(Stmt& s, sqlite3* db, const fs::path& path, const std::string& what) {
  int rc = s.step();
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) return {};
  if (is_corruption(rc)) return corrupt_error(db, path, sqlite3_errmsg(db));
  return db_error(db, path, what);
}

}  // namespace soyaos::moon::detail
