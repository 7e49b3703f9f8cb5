#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with CTest.
# Extra arguments go to ctest (e.g. -L validation, -R attention).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
build=${MINIATTN_BUILD_DIR:-$root/build}
cd "$build"
# Side by side up to the cores: a test reserves as many as its PROCESSORS (its ranks).
ctest --output-on-failure -j "$(nproc)" "$@"
