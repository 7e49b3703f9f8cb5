#!/usr/bin/env bash
# Installs what is missing, builds, and trains the two example decks on 2
# ranks of ring attention: a 4096-token sequence on the lookup task
# (inputs/example.yaml), then a 2048-token one on which the copy across 1025
# positions and both ranks is learned (inputs/example_copy.yaml).
# Re-running skips what is already installed and built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
build=${MINIATTN_BUILD_DIR:-$root/build}
mkdir -p "$root/results"
# One rank per core: keep OpenBLAS from starting a thread per core in every rank.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
cd "$root"
mpiexec -n 2 "$build/src/miniattn" inputs/example.yaml --set run.result=results/example.json "$@"
mpiexec -n 2 "$build/src/miniattn" inputs/example_copy.yaml --set run.result=results/example_copy.json "$@"
