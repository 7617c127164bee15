#!/usr/bin/env bash
# Proves scripts/check_deps.sh can fail: each case builds a small source tree
# in a temporary directory, with or without a deliberate violation, and checks
# the script's exit status and that its message names the offending file.
set -uo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/scripts/check_deps.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

# A tree with a base and an engine module, engine including base (allowed).
new_tree() {
  local root="$tmp/$1"
  mkdir -p "$root/src/base" "$root/src/engine" "$root/tests" "$root/bench" "$root/scripts"
  printf '#pragma once\n#include <string>\n' >"$root/src/base/status.h"
  printf '#include "base/status.h"\n#include "engine/api.h"\n' >"$root/src/engine/engine.cc"
  printf '#pragma once\n' >"$root/src/engine/api.h"
  echo "$root"
}

lines() {  # lines N FILE: a file of N lines
  mkdir -p "$(dirname "$2")"
  seq 1 "$1" | sed 's#^#// line #' >"$2"
}

# expect NAME WANT_RC ROOT [TEXT]: runs the check, compares its status and,
# for a failure, that its output contains TEXT.
expect() {
  local name=$1 want=$2 root=$3 text=${4:-}
  local out rc
  out=$(bash "$script" "$root" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, wanted $want; output:"
    echo "$out"
    fails=$((fails + 1))
    return
  fi
  if [ -n "$text" ] && ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL $name: output does not mention '$text'; output:"
    echo "$out"
    fails=$((fails + 1))
    return
  fi
  echo "ok   $name"
  passes=$((passes + 1))
}

root=$(new_tree clean)
expect "a clean tree passes" 0 "$root"

root=$(new_tree upward)
printf '#pragma once\n#include "engine/api.h"\n' >"$root/src/base/status.h"
expect "an upward include fails" 1 "$root" 'src/base/status.h includes "engine/...", but base may only use: nothing'

root=$(new_tree sideways)
mkdir -p "$root/src/chat"
printf '#include "engine/api.h"\n' >"$root/src/chat/template.cc"
expect "chat including engine fails" 1 "$root" 'src/chat/template.cc includes "engine/...", but chat may only use: base tokenizer'

root=$(new_tree unknown)
mkdir -p "$root/src/mystery"
printf 'int x;\n' >"$root/src/mystery/a.cc"
expect "an unlisted module fails" 1 "$root" "module src/mystery is not listed"

root=$(new_tree at_limit)
lines 1500 "$root/src/engine/scheduler.cc"
expect "a 1500-line file passes" 0 "$root"

root=$(new_tree oversized)
lines 1501 "$root/src/engine/scheduler.cc"
expect "a 1501-line file fails" 1 "$root" "src/engine/scheduler.cc has 1501 lines, over the limit of 1500"

root=$(new_tree oversized_test)
lines 2000 "$root/tests/engine/test_engine.cc"
expect "an oversized test file fails" 1 "$root" "tests/engine/test_engine.cc has 2000 lines"

root=$(new_tree oversized_header)
lines 1600 "$root/src/base/attend-inl.h"
expect "an oversized header fails" 1 "$root" "src/base/attend-inl.h has 1600 lines"

root=$(new_tree generated)
lines 3000 "$root/src/tokenizer/unicode_tables.cc"
mkdir -p "$root/src/tokenizer"
expect "a generated table is exempt by name" 0 "$root"

root=$(new_tree node_modules)
lines 5000 "$root/tests/tokenizer/node_modules/pkg/index.js"
expect "installed npm packages are not project sources" 0 "$root"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
