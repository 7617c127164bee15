#!/usr/bin/env bash
# Configures the Release tree in build/ and builds the given targets; with no
# argument only the `sustain` binary (build/sustain), which is all the main
# job needs. `scripts/test.sh` builds everything (tests and microbenchmarks).
#   bash scripts/build.sh            # build/sustain
#   bash scripts/build.sh all        # every target
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ $# -eq 0 ]; then set -- sustain; fi
cmake --build build -j"$(nproc)" --target "$@"
