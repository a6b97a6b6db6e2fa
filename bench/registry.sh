#!/usr/bin/env bash
# Packs through a real registry (issue #14, docs/registry.md): push and pull of a pack of
# SIZE_MB (default 50) MB of incompressible data against Debian's docker-registry on
# 127.0.0.1 (plain http), against `skopeo copy` of an OCI image whose one layer is the same
# archive (same bytes, same size): skopeo pushes from an OCI layout to a second, empty
# registry and pulls back into a layout. Also checks that an unchanged re-push uploads no
# blob. ROUNDS (default 3) rounds, medians printed. Needs docker-registry and skopeo
# (scripts/setup.sh). SOYAOS_BEFORE=PATH also times the pull of another soyaos binary (an
# older build) in each round, from the same registry, for a before/after in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
SOYAOS=${SOYAOS:-$PWD/build/soyaos}
SIZE_MB=${SIZE_MB:-50}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d /tmp/soyaos-registry-bench-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_registry() {  # NAME VAR: starts one, sets VAR to HOST:PORT (no subshell: its pid is kept for cleanup)
  local name=$1 port
  port=$(free_port)
  mkdir -p "$work/$name"
  cat > "$work/$name/config.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/$name/data}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$port}
YAML
  docker-registry serve "$work/$name/config.yml" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.02; done
  printf -v "$2" '%s' "127.0.0.1:$port"
}
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The pack: the hello-report example plus SIZE_MB of random data.
pack="$work/pack"
cp -r examples/hello-report "$pack"
head -c $((SIZE_MB << 20)) /dev/urandom > "$pack/data.bin"

export DOCKER_CONFIG="$work/docker"
declare -a s_push s_repush s_pull k_push k_pull b_pull
for r in $(seq "$ROUNDS"); do
  start_registry "a$r" A; start_registry "b$r" B
  export SOYAOS_INSECURE_REGISTRIES="$A,$B"
  export SOYAOS_HOME="$work/home-push-$r"
  t0=$(now); out=$("$SOYAOS" pack push "$pack" "$A/bench/pack:1"); t1=$(now)
  s_push+=("$(echo "$t1 - $t0" | bc)")
  t0=$(now); out2=$("$SOYAOS" pack push "$pack" "$A/bench/pack:1"); t1=$(now)
  s_repush+=("$(echo "$t1 - $t0" | bc)")
  grep -q "0 uploaded (0 bytes), 2 already there" <<<"$out2" || { echo "re-push uploaded something: $out2" >&2; exit 1; }
  # A first version is not pulled before the operator approved it (C12): approved first,
  # outside the timing, which measures the transfer. With SOYAOS_BEFORE, the two binaries
  # take turns going first (the registry's page cache favours the second).
  timed_pull() {  # BIN HOME OUT -> seconds
    SOYAOS_HOME="$2" "$1" pack approve "$A/bench/pack:1" >/dev/null
    local t0 t1
    t0=$(now); SOYAOS_HOME="$2" "$1" pack pull "$A/bench/pack:1" -o "$3" >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc
  }
  if [[ -n "${SOYAOS_BEFORE:-}" && $((r % 2)) -eq 0 ]]; then
    b_pull+=("$(timed_pull "$SOYAOS_BEFORE" "$work/home-before-$r" "$work/before-$r")")
  fi
  s_pull+=("$(timed_pull "$SOYAOS" "$work/home-pull-$r" "$work/pulled-$r")")
  if [[ -n "${SOYAOS_BEFORE:-}" && $((r % 2)) -eq 1 ]]; then
    b_pull+=("$(timed_pull "$SOYAOS_BEFORE" "$work/home-before-$r" "$work/before-$r")")
  fi
  # The same archive as an OCI image layer, for skopeo.
  blobs="$work/home-push-$r/remote/blobs/sha256"
  layer=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"])' \
          "$blobs/$(grep -o '"manifest": "sha256:[0-9a-f]*' "$work/home-push-$r/remote/refs.json" | head -1 | cut -d: -f3)")
  size=$(stat -c %s "$blobs/${layer#sha256:}")
  lay="$work/layout-$r"; mkdir -p "$lay/blobs/sha256"
  ln "$blobs/${layer#sha256:}" "$lay/blobs/sha256/${layer#sha256:}"
  cfg="{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"$layer\"]}}"
  cfgd=$(printf '%s' "$cfg" | sha256sum | cut -d' ' -f1); printf '%s' "$cfg" > "$lay/blobs/sha256/$cfgd"
  man="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$cfgd\",\"size\":${#cfg}},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"$layer\",\"size\":$size}]}"
  mand=$(printf '%s' "$man" | sha256sum | cut -d' ' -f1); printf '%s' "$man" > "$lay/blobs/sha256/$mand"
  echo '{"imageLayoutVersion":"1.0.0"}' > "$lay/oci-layout"
  echo "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$mand\",\"size\":${#man},\"annotations\":{\"org.opencontainers.image.ref.name\":\"1\"}}]}" > "$lay/index.json"
  t0=$(now); skopeo copy -q --dest-tls-verify=false "oci:$lay:1" "docker://$B/bench/image:1"; t1=$(now)
  k_push+=("$(echo "$t1 - $t0" | bc)")
  t0=$(now); skopeo copy -q --src-tls-verify=false "docker://$B/bench/image:1" "oci:$work/skopeo-pulled-$r:1"; t1=$(now)
  k_pull+=("$(echo "$t1 - $t0" | bc)")
done

mbps() { echo "scale=1; $SIZE_MB / $1" | bc; }
sp=$(printf '%s\n' "${s_push[@]}" | median); sr=$(printf '%s\n' "${s_repush[@]}" | median)
sl=$(printf '%s\n' "${s_pull[@]}" | median); kp=$(printf '%s\n' "${k_push[@]}" | median)
kl=$(printf '%s\n' "${k_pull[@]}" | median)
printf 'registry bench: %s MB pack, %s rounds, medians (docker-registry on 127.0.0.1, plain http)\n' "$SIZE_MB" "$ROUNDS"
printf '  soyaos pack push   %6.2f s  %6s MB/s\n' "$sp" "$(mbps "$sp")"
printf '  skopeo copy (push) %6.2f s  %6s MB/s\n' "$kp" "$(mbps "$kp")"
printf '  soyaos pack pull   %6.2f s  %6s MB/s  (verified + extracted)\n' "$sl" "$(mbps "$sl")"
printf '  skopeo copy (pull) %6.2f s  %6s MB/s\n' "$kl" "$(mbps "$kl")"
if [[ -n "${SOYAOS_BEFORE:-}" ]]; then
  bl=$(printf '%s\n' "${b_pull[@]}" | median)
  printf '  pull, SOYAOS_BEFORE %6.2f s  %6s MB/s  (%s)\n' "$bl" "$(mbps "$bl")" "$SOYAOS_BEFORE"
fi
printf '  soyaos re-push     %6.2f s  (no blob uploaded)\n' "$sr"
