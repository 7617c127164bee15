#!/usr/bin/env bash
# Enforces two rules of DESIGN.md (§2 and §9) on a source tree:
#  1. each module under src/ may include only itself and the modules below it;
#  2. no hand-written source file (src/, tests/, bench/, scripts/) is over
#     MAX_LINES lines; generated tables are exempt by name (GENERATED below).
# Usage: check_deps.sh [ROOT]   (ROOT defaults to the repository this script is in)
# Prints every offence and exits 1 if there is any.
set -euo pipefail
if [ $# -gt 0 ]; then
  cd "$1"
else
  cd "$(dirname "$0")/.."
fi

MAX_LINES=1500

# module -> modules it may include (besides itself), as DESIGN.md §2 draws them
declare -A ALLOWED=(
  [base]=""
  [tensor]="base"
  [gguf]="base tensor"
  [kernels]="base tensor"
  [kv]="base tensor kernels"
  [attention]="base tensor kernels kv"
  [sampling]="base tensor kernels"
  [tokenizer]="base gguf tensor"
  [chat]="base tokenizer"
  [grammar]="base tokenizer sampling"
  [model]="base tensor gguf kernels kv attention"
  [plan]="base tensor model kv"
  [dist]="base tensor kernels"
  [vision]="base tensor gguf kernels"
  [spec]="base model kv sampling tensor"
  [engine]="base tensor gguf kernels kv attention sampling tokenizer chat model plan dist vision spec"
  [server]="base engine tokenizer chat grammar"
  [bench]="base kernels plan engine tensor gguf model attention tokenizer eval tools"
  [eval]="base engine model tokenizer tensor gguf"
  [tools]="base tensor gguf model"
  [cli]="*"
)

# Generated files, exempt from the size rule (each says so in its first line).
GENERATED=(
  src/tokenizer/unicode_tables.cc
)

bad=0
for dir in src/*/; do
  [ -d "$dir" ] || continue
  mod=$(basename "$dir")
  if [ -z "${ALLOWED[$mod]+x}" ]; then
    echo "check_deps: module src/$mod is not listed in scripts/check_deps.sh (add it with its allowed deps)"
    bad=1
    continue
  fi
  allowed="${ALLOWED[$mod]}"
  [ "$allowed" = "*" ] && continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include[[:space:]]+"([^"/]+)\/.*/\1/' <<<"$line")
    [ "$inc" = "$mod" ] && continue
    ok=0
    for a in $allowed; do [ "$a" = "$inc" ] && ok=1; done
    if [ $ok -eq 0 ] && [ -d "src/$inc" ]; then
      echo "check_deps: $file includes \"$inc/...\", but $mod may only use: ${allowed:-nothing}"
      bad=1
    fi
  done < <(grep -rnE '^[[:space:]]*#include[[:space:]]+"[^"/]+/' "$dir" || true)
done
if [ $bad -eq 0 ]; then echo "check_deps: every module includes only modules below it"; fi

size_bad=0
while IFS= read -r -d '' f; do
  f=${f#./}
  exempt=0
  for g in "${GENERATED[@]}"; do [ "$g" = "$f" ] && exempt=1; done
  [ $exempt -eq 1 ] && continue
  n=$(wc -l <"$f")
  if [ "$n" -gt "$MAX_LINES" ]; then
    echo "check_deps: $f has $n lines, over the limit of $MAX_LINES (split it by concern; DESIGN.md §9)"
    size_bad=1
  fi
done < <(find ./src ./tests ./bench ./scripts -name node_modules -prune -o -type f \
           \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.c' \
              -o -name '*.sh' -o -name '*.py' -o -name '*.js' -o -name '*.mjs' -o -name '*.cmake' \
              -o -name 'CMakeLists.txt' \) -print0 2>/dev/null)
if [ $size_bad -eq 0 ]; then echo "check_deps: no source file is over $MAX_LINES lines"; fi

[ $bad -eq 0 ] && [ $size_bad -eq 0 ]
