// A secret typed by the operator (review item D3: `secret set` and `pack sign` read theirs
// the same way): on a terminal, `prompt` on stderr and one line typed without echo (its
// newline dropped); otherwise stdin read to its end and one trailing newline dropped. The
// bytes live in SecretBytes (locked, wiped), never in a std::string.
#pragma once

#include <string>

#include "common/result.h"
#include "common/secret_bytes.h"

namespace soyaos::cli {

Result<SecretBytes> read_hidden_stdin(const std::string& prompt);

}  // namespace soyaos::cli
