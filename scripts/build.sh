#!/usr/bin/env bash
# Configures (once) and builds miniattn into build/ (or $MINIATTN_BUILD_DIR):
# every target, or those $MINIATTN_BUILD_TARGETS names (space-separated).
# Extra arguments go to the first CMake configure, e.g. -DKokkos_ROOT=/opt/kokkos.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MINIATTN_BUILD_DIR:-$root/build}
# A configure that stopped (a package missing) leaves a cache but no build
# system: configure again, so that installing the package is all it takes.
if [ ! -f "$build/CMakeCache.txt" ] || { [ ! -f "$build/Makefile" ] && [ ! -f "$build/build.ninja" ]; }; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
fi
# shellcheck disable=SC2086 # the targets are words
cmake --build "$build" --parallel "$(nproc)" ${MINIATTN_BUILD_TARGETS:+--target $MINIATTN_BUILD_TARGETS}
