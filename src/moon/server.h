// `soyaos moon serve`: the Moon as a daemon on a unix socket (docs/moon.md "Daemon
// mode"). Each request (wire format: moon/wire.h) is executed against an embedded Moon of
// the daemon's home (moon/backend.h), so both modes share every code path below the
// socket. A thread per client (at most ServeOptions::max_clients at once; more wait in
// the listen backlog); each thread borrows its own Registry/Store (SQLite connection) from
// a pool, and SQLite's locking orders the writers as it does between processes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

#include "common/result.h"

namespace soyaos::moon {

struct ServeOptions {
  std::filesystem::path home;
  std::filesystem::path socket;     // default: HOME/moon.sock
  std::string group;                // non-empty: socket mode 0660 and this group, else 0600
  size_t max_clients = 64;
  std::string version;              // reported by status
  std::function<void(const std::string&)> log;  // one line per event worth logging
  // Called once the socket is listening (tests, readiness messages).
  std::function<void(const std::filesystem::path& socket)> ready;
};

// Serves until SIGTERM, SIGINT or SIGHUP, then stops accepting, lets the requests in
// progress finish (up to 10 s), removes the socket and returns. Errors that prevent
// starting (another daemon answers on the socket, the path is not a socket, an unknown
// group, an unusable home) are returned before anything is served.
Status serve(const ServeOptions& options);

}  // namespace soyaos::moon
