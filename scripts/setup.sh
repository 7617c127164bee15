#!/usr/bin/env bash
# Installs everything sustain needs to build and test on Debian 12 (apt only).
# Idempotent: does nothing when every package is already there.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build git pkg-config
  clang libclang-rt-14-dev   # libFuzzer + sanitizer runtimes for the fuzz stage
  libhwy-dev                 # SIMD with run-time dispatch (kernels)
  nlohmann-json3-dev         # JSON for --json outputs, reports, sidecars
  libcli11-dev               # command-line parsing with range-checked flags
  libfmt-dev                 # formatting of messages and tables
  libcpp-httplib-dev         # HTTP server (serving issue)
  libstb-dev                 # PNG/JPEG decoding for image input (the reference's decoder)
  libopenmpi-dev openmpi-bin # ranks over MPI for --split (mpirun, collectives)
  libgtest-dev libgmock-dev  # unit tests
  libbenchmark-dev           # microbenchmarks
)

# Node.js runs the reference tokenizers (transformers.js) the tokenizer tests
# compare with; a machine that already has node keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PKGS+=(nodejs npm)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash "$(dirname "$0")/setup_npm.sh"
