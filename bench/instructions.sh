#!/usr/bin/env bash
# Instructions executed (valgrind --tool=callgrind, "Ir") by three soyaos commands, for this
# binary and optionally BEFORE=<another soyaos>, side by side with the ratio (review L5):
#   version     `soyaos version` (start-up of the binary itself)
#   cache hit   `soyaos run` of the no-op pack replayed from the result cache (the run that
#               filled the cache is not measured)
#   run         the supervisor of `soyaos run --no-cache` of the no-op pack (its own
#               process only: the Comet's processes are not traced)
# Unlike wall time, an instruction count hardly moves with the machine's load: a change of
# a few percent is visible. The median of RUNS (default 3) counts is printed.
# valgrind 3.19 (Debian 12) implements neither clone3(2) (ENOSYS: the Comet's namespaces
# cannot be created) nor seccomp(2) (libseccomp cannot build the Comet's filter), so under
# it `run --no-cache` refuses to start, as it must. That row then says why ("n/a") instead
# of counting a refused run; bench/startup.sh measures the supervisor's CPU time per phase.
#   SOYAOS=PATH (default build/soyaos)   BEFORE=PATH   RUNS=N
source "$(dirname "$0")/lib.sh" instructions
RUNS=${RUNS:-3}
BEFORE=${BEFORE:-}
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (scripts/setup.sh)" >&2; exit 2; }
noop_pack "$work/pack"

# Ir of one command under callgrind (its own process), or "n/a: why" when it failed.
ir() {  # NAME BINARY ARGS...
  local name=$1 bin=$2; shift 2
  local out="$work/cg.$name.out" log="$work/cg.$name.log"
  rm -f "$out"
  local rc=0
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$@" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    local why
    why=$(grep -v '^==\|^--' "$log" | grep -m1 . || true)
    echo "n/a: ${why:-exit status $rc}"
    return
  fi
  sed -n 's/^totals: *//p' "$out"
}

# The median count of RUNS runs of one measurement for BIN ("n/a: ..." when one failed).
measure() {  # WHAT BIN
  local what=$1 bin=$2 counts=() c home="$work/home-$(basename "$2")-$RANDOM"
  if [[ $what == hit ]]; then
    # The entry the hits replay: one real run, not measured.
    SOYAOS_HOME=$home "$bin" run "$work/pack" --out "$work/fill-$RANDOM" >/dev/null 2>&1 ||
      { echo "n/a: the run that fills the cache failed"; return; }
  fi
  for ((i = 0; i < RUNS; i++)); do
    case $what in
      version) c=$(ir version "$bin" version) ;;
      hit) c=$(SOYAOS_HOME=$home ir hit "$bin" run "$work/pack" --out "$work/hit-$i-$RANDOM") ;;
      run) c=$(SOYAOS_HOME=$home ir run "$bin" run "$work/pack" --no-cache --out "$work/run-$i-$RANDOM") ;;
    esac
    if [[ $c == n/a* ]]; then echo "$c"; return; fi
    counts+=("$c")
  done
  MEDIAN_FORMAT=%d median "${counts[@]}"
}

echo "== instructions executed (callgrind Ir, median of $RUNS); $(load_note)"
echo "   this:   $SOYAOS"
[[ -n $BEFORE ]] && echo "   before: $BEFORE"
if [[ -n $BEFORE ]]; then
  printf '%-18s %16s %16s %8s\n' command this before ratio
else
  printf '%-18s %16s\n' command this
fi
for what in version hit run; do
  case $what in
    version) label="version" ;;
    hit) label="cache hit" ;;
    run) label="run (supervisor)" ;;
  esac
  this=$(measure "$what" "$SOYAOS")
  if [[ -z $BEFORE ]]; then
    if [[ $this == n/a* ]]; then printf '%-18s %s\n' "$label" "$this"; else printf '%-18s %16s\n' "$label" "$this"; fi
    continue
  fi
  before=$(measure "$what" "$BEFORE")
  if [[ $this == n/a* || $before == n/a* ]]; then
    printf '%-18s this: %s; before: %s\n' "$label" "$this" "$before"
  else
    printf '%-18s %16s %16s %8s\n' "$label" "$this" "$before" "$("$PY" -c 'import sys; print("%.3f" % (int(sys.argv[1]) / int(sys.argv[2])))' "$this" "$before")"
  fi
done
