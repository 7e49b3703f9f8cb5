#!/usr/bin/env bash
# Builds miniattn with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-sanitize/ (or $MINIATTN_SANITIZE_BUILD_DIR) and runs the unit tests and
# 2-rank model tests under them (only the targets they run are built:
# scripts/test_targets.py). Any sanitizer report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
build=${MINIATTN_SANITIZE_BUILD_DIR:-$root/build-sanitize}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINIATTN_ENABLE_SANITIZERS=ON \
    -DMINIATTN_CUDNN_GRAPH_CHECK=OFF "$@"
else
  # The test list the selection below reads is the last configure's: tests
  # added since then would be run without being built.
  cmake "$build" > /dev/null
fi
unit=(-L unit)
model=(-R "^(reference\.fp64\.causal\.np2\.step2|driver\.sp\.ring\.np2\.dp1|driver\.sp\.ulysses\.np2\.dp1|driver\.tp\.local\.np2\.dp1\.tp2)$")
targets_of() { (cd "$build" && ctest -N "$@" --show-only=json-v1 | "$root/scripts/test_targets.py" "$build"); }
targets="$(targets_of "${unit[@]}") $(targets_of "${model[@]}")"
# shellcheck disable=SC2086 # the targets are words
cmake --build "$build" --parallel "$(nproc)" --target $targets
# MPICH keeps some allocations until exit by design: leak reports would be noise.
# CTest preloads the tests' uninstrumented yield shim (tests/yield_idle_ranks.cpp)
# ahead of the ASan runtime; it intercepts nothing ASan does, so the order is safe.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:verify_asan_link_order=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
# Both cores: the tests are independent processes (one rank or two each).
ctest --output-on-failure --no-tests=error -j "$(nproc)" "${unit[@]}"
ctest --output-on-failure --no-tests=error -j "$(nproc)" "${model[@]}"
