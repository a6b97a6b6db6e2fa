#include "cli/hidden_input.h"

#include <termios.h>
#include <unistd.h>

#include <cstdio>

namespace soyaos::cli {

Result<SecretBytes> read_hidden_stdin(const std::string& prompt) {
  struct termios saved {};
  const bool tty = ::isatty(STDIN_FILENO) == 1 && ::tcgetattr(STDIN_FILENO, &saved) == 0;
  if (!tty) {
    auto v = SecretBytes::read_all(STDIN_FILENO, "stdin");
    if (v) v->drop_trailing_newline();
    return v;
  }
  struct termios quiet = saved;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
  quiet.c_lflag |= ICANON;
  // Echo off before the prompt, as getpass(3) does: TCSAFLUSH discards what was typed before
  // it, so a value typed as soon as the prompt showed was lost and the read waited forever.
  if (::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) != 0) return errno_error("turn off the terminal's echo");
  std::fputs(prompt.c_str(), stderr);
  (void)std::fflush(stderr);
  // A canonical-mode read returns one line at most.
  auto v = SecretBytes::read_all(STDIN_FILENO, "the terminal", /*one_line=*/true);
  (void)::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
  std::fputc('\n', stderr);
  if (v) v->drop_trailing_newline();
  return v;
}

}  // namespace soyaos::cli
