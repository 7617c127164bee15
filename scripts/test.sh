#!/usr/bin/env bash
# Builds and runs every test:
#  1. the Release build and its whole ctest suite;
#  2. a clang ASan+UBSan build of the libFuzzer targets - the GGUF reader
#     (FUZZ_SECONDS, default 60), the chat-template engine, the server's
#     request validation, the grammar module, the tokenizer (every
#     vocabulary in ../shared/ref/vocab) and the stop-string matcher with its
#     SSE framing, and image decoding (default 30 each) - each run for a
#     bounded time on its seed corpus, plus the malformed-file unit tests
#     and the image-decoding tests (untrusted bytes) under the same
#     sanitizers.
# Tests that need ../shared/ref report "skipped" where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh all
(cd build && ctest --output-on-failure -j"$(nproc)")

if [ "${SKIP_FUZZ:-0}" != "1" ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSUSTAIN_SANITIZE=ON -DSUSTAIN_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target fuzz_gguf fuzz_chat_template fuzz_request fuzz_grammar \
    fuzz_tokenizer fuzz_stop_strings fuzz_image test_gguf test_vision_image
  (cd build-fuzz && ctest --output-on-failure -L sanitize -j"$(nproc)")
fi
