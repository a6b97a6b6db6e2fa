// Making text that an agent or a pack author chose safe to show (SPEC.md E7, issue #15).
//
// Paths, output names, DNS names and HTTP heads reach the supervisor from a hostile
// program. Printed raw, a terminal escape sequence in one of them can erase the violation
// summary and paint a fake one; stored raw, a name that is not UTF-8 makes JSON invalid.
// Both escapings below use one notation, `\xNN` for a byte and `\u{XXXX}` for a code
// point, so a person reads the same thing in a terminal and in the JSON.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace soyaos {

// For a terminal (or any human-readable output): invalid UTF-8 bytes become `\xNN`; C0
// controls and DEL become `\xNN` (or `\n`, `\t`, `\r`); C1 controls (U+0080..U+009F), the
// bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069) and the line and
// paragraph separators (U+2028, U+2029) become `\u{XXXX}`; a backslash becomes `\\`, so
// that no raw text can pose as an escape. Everything else (printable UTF-8) is kept.
std::string escape_for_terminal(std::string_view text);

// The same for a message of several lines that are ours (e.g. "invalid manifest:" and one
// diagnostic per line): each line is escaped as above and the line breaks between them are
// kept, so every diagnostic is read on its own line while a newline inside a line's text
// could not be told from ours (only a '\n' byte splits; a '\r' or any other control inside
// a line is escaped).
std::string escape_lines_for_terminal(std::string_view text);

// For JSON, which carries control characters itself (as \uXXXX) but needs valid UTF-8:
// valid UTF-8 is kept unchanged; each byte of an invalid sequence becomes `\xNN` (four
// ASCII characters). A name that really contains the four characters `\xNN` reads the
// same: the JSON form is for people and tools, the host file keeps its real bytes.
std::string valid_utf8(std::string_view text);

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Cuts `text` to at most `max_bytes` bytes, on a UTF-8 boundary, ending with a marker
// that says how much was cut ("…[+1234 bytes]"); unchanged when it fits.
std::string truncate_utf8(std::string_view text, size_t max_bytes);

}  // namespace soyaos
