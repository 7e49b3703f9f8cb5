#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with CTest.
# Extra arguments go to ctest (e.g. -L validation, -R attention).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
# cudnn-frontend for the cuDNN graph test (nothing when its tarball is absent);
# CMake finds it in build-deps/ by itself, the argument matters only for
# MINIATTN_DEPS_DIR and only on the first configure.
frontend=$("$root/scripts/unpack_cudnn_frontend.sh")
"$root/scripts/build.sh" ${frontend:+-DCUDNN_FRONTEND_ROOT="$frontend"}
build=${MINIATTN_BUILD_DIR:-$root/build}
cd "$build"
# Side by side up to the cores: a test reserves as many as its PROCESSORS (its ranks).
ctest --output-on-failure -j "$(nproc)" "$@"
