// The secret echo guard's cost (docs/benchmarks-issue16.md, session 12): MiB/s of response
// data through SecretEchoGuard::feed_data in 16 KiB reads (the exchange's read size), for 0,
// 1 and 3 run secrets, over text of JSON-ish bytes (a value's first byte every ~70 bytes)
// and over a worst case where every byte continues a partial match.
//   build/bench/secret_echo_bench [MiB per case, default 256]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "supervisor/secret_echo_guard.h"

using soyaos::supervisor::SecretEchoGuard;

namespace {

double mib_per_s(const std::vector<SecretEchoGuard::Secret>& secrets, const std::string& chunk, size_t total) {
  SecretEchoGuard guard(secrets);
  std::string out;
  out.reserve(chunk.size() * 2);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < total; done += chunk.size()) {
    out.clear();
    (void)guard.feed_data(chunk, out);
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(total) / (1024.0 * 1024.0) / sec;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const size_t total = mib << 20;
  std::string text(16384, ' ');
  std::mt19937 rng(1);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n{}\":,-_";
  for (char& c : text) c = alphabet[rng() % alphabet.size()];
  const std::string worst(16384, 'a');  // against a value of a's: always a partial match
  const std::string v1 = "sk-live-ECHO7Q2w9ZxT4mN8bYc1d0123456789abcdef";
  const std::string v2 = "ghp_0123456789abcdefABCDEF0123456789";
  const std::string v3 = "xoxb-1234-5678-abcdefghijkl";
  const std::string va(40, 'a');
  const std::vector<SecretEchoGuard::Secret> none, one = {{"A", v1}}, three = {{"A", v1}, {"B", v2}, {"C", v3}};
  std::printf("text, 0 secrets: %.0f MiB/s\n", mib_per_s(none, text, total));
  std::printf("text, 1 secret: %.0f MiB/s\n", mib_per_s(one, text, total));
  std::printf("text, 3 secrets: %.0f MiB/s\n", mib_per_s(three, text, total));
  std::printf("worst case (every byte continues a match), 1 secret: %.0f MiB/s\n",
              mib_per_s({{"A", va + "b"}}, worst, total));
  return 0;
}
