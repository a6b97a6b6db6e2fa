#!/usr/bin/env bash
# Installs the Debian 12 packages soyaos needs to build and test, then configures and
# builds it in ./build. Idempotent: installs only what is missing, rebuilds incrementally.
# As root it installs with apt-get; otherwise it prints exactly what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libseccomp-dev libcap-dev libsqlite3-dev libssl-dev libmnl-dev
  libnftables-dev           # tests only: the reference the Comet's nfnetlink ruleset is checked against
  libsodium-dev             # Ed25519 signatures of the Scope checkpoints (src/moon/chain.cc)
  nettle-dev                # SHA-256 with the CPU's SHA extensions (src/common/digest.cc)
  libgtest-dev libgmock-dev
  python3 nodejs util-linux iproute2 nftables
  python3-requests python3-httpx python3-dev  # tests/compat: clients, a C extension's headers
  clang libclang-rt-14-dev  # libFuzzer and sanitizers
  bubblewrap hyperfine      # benchmark peers
  valgrind                  # bench/instructions.sh (callgrind instruction counts)
  libcurl4-openssl-dev      # the OCI registry client (src/oci)
  docker-registry apache2-utils skopeo  # tests: a real registry, htpasswd, interop
  minisign                  # interop tests of pack signatures (src/common/minisign.h)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages; install them with:" >&2
    echo "  sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# The compatibility corpus' npm packages (tests/compat/node: openai and @anthropic-ai/sdk,
# pinned by the committed package-lock.json) go to tests/compat/node/node_modules (gitignored):
# `npm ci` runs only when they are missing or the lockfile changed. (npm comes with Node:
# Debian's `npm` package, or NodeSource's `nodejs`, which bundles it.)
compat_node=tests/compat/node
compat_stamp=$compat_node/node_modules/.soyaos-lock.sha256
compat_lock=$(sha256sum "$compat_node/package-lock.json" | cut -d' ' -f1)
if [[ "$(cat "$compat_stamp" 2>/dev/null)" != "$compat_lock" ]]; then
  if ! command -v npm >/dev/null; then
    echo "setup: npm is missing (tests/compat needs it); install it with: sudo apt-get install npm" >&2
    exit 1
  fi
  echo "setup: npm ci in $compat_node"
  (cd "$compat_node" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$compat_lock" >"$compat_stamp"
fi

BUILD_DIR=${BUILD_DIR:-build}
# RelWithDebInfo with line tables only (-g1): backtraces and sanitizer reports keep file:line;
# full debug info made the -O2 build ~30% slower to compile (most of it CLI11 and
# nlohmann/json templates), which CI pays on every clean machine.
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOYAOS_WERROR=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    ${CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$BUILD_DIR" -j2
