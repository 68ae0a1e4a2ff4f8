#!/usr/bin/env bash
# `make test TEST_ARGS=...`'s arguments, with suite names turned into the test binary that holds
# them: the integration suites are grouped into a few binaries (Cargo.toml's [[test]] targets;
# each binary's root, tests/<binary>.rs, names its suites with `#[path = "<suite>.rs"]`), so
# `--test drain` becomes `--test data_path` and the test filter `drain::` (that suite's tests
# only). A binary's own name, and every other argument, pass as they are. Filters given after
# `--` narrow the run themselves (libtest runs a test matching any filter): the suites' filters
# are then left out, and the whole binary is filtered by the given ones.
set -euo pipefail
cd "$(dirname "$0")/.."

binary_of() {
  local f
  for f in tests/*.rs; do
    if grep -qx "#\[path = \"$1.rs\"\]" "$f"; then
      basename "$f" .rs
      return
    fi
  done
}

cargo_args=() binaries=() filters=() after=() own_filter=0 dashes=0 prev=""
take_test() {
  local b
  b=$(binary_of "$1")
  if [ -z "$b" ]; then
    cargo_args+=(--test "$1")
    return
  fi
  case " ${binaries[*]-} " in *" $b "*) ;; *) binaries+=("$b"); cargo_args+=(--test "$b") ;; esac
  filters+=("$1::")
}

args=("$@")
i=0
while [ $i -lt ${#args[@]} ]; do
  a=${args[$i]}
  if [ $dashes = 1 ]; then
    after+=("$a")
    case "$prev" in --skip|--test-threads|--color|--format|--logfile|-Z|--shuffle-seed) ;; *)
      case "$a" in -*) ;; *) own_filter=1 ;; esac ;;
    esac
    prev=$a
  elif [ "$a" = "--" ]; then
    dashes=1
  elif [ "$a" = "--test" ] && [ $((i + 1)) -lt ${#args[@]} ]; then
    i=$((i + 1))
    take_test "${args[$i]}"
  elif [[ "$a" == --test=* ]]; then
    take_test "${a#--test=}"
  else
    cargo_args+=("$a")
  fi
  i=$((i + 1))
done
[ $own_filter = 1 ] && filters=()
out=("${cargo_args[@]}")
if [ ${#filters[@]} -gt 0 ] || [ ${#after[@]} -gt 0 ]; then
  out+=(-- "${filters[@]}" "${after[@]}")
fi
echo "${out[*]}"
