#!/usr/bin/env bash
# Configures (once) and builds miniattn into build/ (or $MINIATTN_BUILD_DIR).
# Extra arguments go to the first CMake configure, e.g. -DKokkos_ROOT=/opt/kokkos.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MINIATTN_BUILD_DIR:-$root/build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build" --parallel "$(nproc)"
