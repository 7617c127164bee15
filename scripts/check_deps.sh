#!/usr/bin/env bash
# Enforces DESIGN.md §2: each module under src/ may include only itself and
# the modules below it. Prints every offending #include and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."

# module -> modules it may include (besides itself)
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
  [model]="base tensor gguf kernels kv attention"
  [plan]="base tensor model kv"
  [spec]="base model kv sampling tensor"
  [engine]="base tensor gguf kernels kv attention sampling tokenizer model plan spec"
  [server]="base engine tokenizer chat"
  [bench]="base kernels plan engine tensor"
  [eval]="base engine model tokenizer tensor gguf"
  [tools]="base tensor gguf model"
  [cli]="*"
)

bad=0
for dir in src/*/; do
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
exit $bad
