#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2016  # "A && B || die" is meant; printed exports expand later
# GPU bring-up: build and run miniattn on a bare CUDA machine that has a CUDA
# toolkit (with NCCL), CMake, g++ and a Python with PyTorch, h5py and numpy,
# but no MPI, no HDF5, no package registry and no internet. docs/gpu_bringup.md
# explains every phase and output file.
#
#   scripts/gpu_bringup.sh fetch        HERE (Debian 12, as root): apt-get download the
#                                       Debian packages into build-deps/debs/ and copy the
#                                       Kokkos tarballs to build-deps/third_party/
#   scripts/gpu_bringup.sh [all]        ON THE GPU MACHINE: every step below, in order
#   scripts/gpu_bringup.sh STEP...      only those steps (each re-runnable):
#       check      machine, glibc, tools, Python, packages: refuses clearly what cannot work
#       unpack     the .debs into build-deps/debroot/, then an MPI + parallel HDF5 smoke test
#       kokkos     scripts/build_kokkos.sh cuda (skipped when its prefix is complete)
#       build      scripts/build_cuda.sh into build-gpu/ against the unpacked packages
#       test       ctest: the whole suite but the NCCL (one GPU per rank) and Slurm tests
#       cudnn      the cuDNN attention checks alone: ctest -L cudnn (reference checks of every
#                  strategy, bitwise repeats), the bf16 kernel tests with cuDNN, one
#                  1-rank training run with parallel.comm nccl and kernels.attention cudnn
#       train      inputs/example.yaml on 1 rank
#       reference  fp64 snapshots checked against the PyTorch float64 reference
#       bench      miniattn bench + bench_attention + PyTorch (cuBLAS, SDPA, training step)
#       profile    Nsight Compute on cuDNN's attention kernels (cudnn kernel; not part of all)
#       kernels    Kokkos Tools' kernel timer on the bf16 cudnn step (not part of all)
#       stepkernels  Nsight Compute's time of every kernel of the bf16 cudnn step, summed by
#                  kernel beside PyTorch's step (not part of all)
#       long       bf16 calibration with cuDNN (h200-bf16.yaml), a million tokens on one GPU in
#                  both backward modes, the longest N under 16 GiB, PyTorch at a million tokens,
#                  predicted against measured (not part of all; the second call of a lease)
#       documents  packed documents on cuDNN: a call per document against one ragged call, in
#                  place and on a packed copy, at documents of 512, 4096, 32768 and drawn
#                  lengths, both backward modes (bench_cudnn_documents; not part of all; after
#                  long in the second call)
#   scripts/gpu_bringup.sh session      the one-lease list: check unpack kokkos build cudnn bench,
#                                       building only what cudnn and bench run, with the bench
#                                       narrowed to N = 32768 and the gemm kernel
#                                       (MINIATTN_BUILD_TARGETS and MINIATTN_BENCH_* as set override)
#   scripts/gpu_bringup.sh session-targets   print the targets `session` builds (CI's CUDA check
#                                       builds the same)
#   scripts/gpu_bringup.sh cmake-args   print the CMake arguments that point at the unpacked
#                                       packages (one a line), for a configure by hand
#   scripts/gpu_bringup.sh env          print the PATH / LD_LIBRARY_PATH exports
#
# Environment: CUDA_HOME (/usr/local/cuda), MINIATTN_KOKKOS_CUDA_ARCH (HOPPER90),
# MINIATTN_PYTHON (python3 on PATH), MINIATTN_BUILD_DIR (build-gpu),
# MINIATTN_BRINGUP_RESULTS (results/gpu), MINIATTN_GPU_TESTS (ctest -R regex of the
# tests to run), MINIATTN_BENCH_SEQ_LENS and MINIATTN_BENCH_FP32_KERNELS (bench: the fp32
# sequence lengths, "8192 32768", and kernels, "gemm fused"), OUT (when set, each
# invocation ends by copying the summary, the figures and a tarball of the results there).
set -Eeuo pipefail
trap 'echo "gpu_bringup: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/build-deps
debs=$deps/debs
debroot=$deps/debroot
runtime_lib=$debroot/runtime-lib
triplet=x86_64-linux-gnu
cuda_home=${CUDA_HOME:-/usr/local/cuda}
build=${MINIATTN_BUILD_DIR:-$root/build-gpu}
results=${MINIATTN_BRINGUP_RESULTS:-$root/results/gpu}
all_steps=(check unpack kokkos build test train reference bench)

say() { echo "gpu_bringup: $*"; }
die() { echo "gpu_bringup: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- fetch (here)
# What the CMake build and the runs need that a bare CUDA machine lacks
# (cmake/MiniattnDependencies.cmake, src/io (ZLIB), tests (GTest)). No BLAS:
# the CUDA build uses cuBLAS through Kokkos Kernels. patch: build_kokkos.sh
# patches Kokkos for CUDA 13, and a bare image may not have it.
roots=(libmpich-dev mpich libhdf5-mpich-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
       libgtest-dev zlib1g-dev patch)
# Never fetched. The C runtime and the compilers must be the machine's own (a
# second libc or libstdc++ is what breaks a system); package tooling; the
# Fortran and C++ HDF5/MPI bindings and their runtimes (miniattn is C++ on the C
# APIs); hwloc's tools, fonts and X (pulled in by lstopo); autotools.
deny='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc.*|rpcsvc-proto'
deny+='|libgcc-s1|libstdc[+][+]6|gcc.*|g[+][+].*|cpp.*|gfortran.*|flang.*|lib(gcc|stdc[+][+]|gfortran|flang)-.*-dev'
deny+='|binutils.*|libbinutils|libctf.*|libgprofng0|lib(a|l|t|ub)san[0-9]*|libitm1|libatomic1|libcc1-0|libisl[0-9]+'
deny+='|libmpc3|libmpfr6|libgomp1|libclang.*|libllvm.*|libmlir.*|libz3-4|libgfortran5|libquadmath0'
deny+='|libhdf5-mpich-(fortran|hl-fortran|cpp|hl-cpp)-.*'
deny+='|dpkg|debconf.*|cdebconf.*|debianutils|install-info|adduser|passwd|login|tar|perl.*|libperl.*|sysvinit-utils'
deny+='|lsb-base|init-system-helpers|libpam.*|libaudit.*|libselinux1|libsemanage.*|libsepol2|libcap-ng0|libacl1'
deny+='|libattr1|libdb5[.]3|libgdbm.*|readline-common|libreadline8|libtinfo6|libdebian-installer4|libnewt0[.]52'
deny+='|libslang2|libtextwrap1|libbsd0|libmd0'
deny+='|hwloc|hwloc-nox|libx.*|x11-.*|fonts-.*|fontconfig.*|libcairo2|libfreetype6|libpng16-16|libpixman-1-0'
deny+='|libfontenc1|xfonts-.*|ttf-.*|autoconf|automake|autotools-dev|m4|libltdl.*|libtool)$'

# Depends and Pre-Depends of one package, one chosen alternative per group.
# A -dev package's -dev dependencies are left out unless they are roots: they
# serve static linking and the compiler wrappers, which this build does not use.
package_deps() {
  local pkg=$1
  apt-cache depends --important "$pkg" 2>/dev/null | awk -v deny="$deny" -v dev="$([[ $pkg == *-dev ]] && echo 1)" '
    /^ *\|?(Pre)?Depends: / {
      alt = ($1 ~ /^\|/); name = $2
      usable = name !~ /^</ && name !~ deny && !(dev && name ~ /-dev$/)
      if (usable && !chosen) { print name; chosen = 1 }
      if (!alt) chosen = 0
    }'
}

fetch() {
  [ "$(id -u)" -eq 0 ] || die "fetch runs apt-get download as root on Debian 12"
  # shellcheck disable=SC1091
  . /etc/os-release
  [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ] ||
    die "fetch must run on Debian 12 (the GPU side checks glibc against Debian 12's); this is ${PRETTY_NAME:-unknown}"
  local is_root p dep
  local -A wanted=() is_root_pkg=()
  local queue=("${roots[@]}")
  for p in "${roots[@]}"; do is_root_pkg[$p]=1; done
  say "resolving the dependency closure of: ${roots[*]}"
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}; queue=("${queue[@]:1}")
    [ -n "${wanted[$p]:-}" ] && continue
    apt-cache show "$p" > /dev/null 2>&1 || { say "  (no package $p: skipped)"; continue; }
    wanted[$p]=1
    while read -r dep; do
      if [ -n "$dep" ] && [ -z "${wanted[$dep]:-}" ]; then queue+=("$dep"); fi
    done < <(package_deps "$p")
  done
  local names
  mapfile -t names < <(printf '%s\n' "${!wanted[@]}" | sort)
  say "${#names[@]} packages: ${names[*]}"

  mkdir -p "$debs"
  local failed=()
  cd "$debs"
  for p in "${names[@]}"; do
    if compgen -G "${p}_*.deb" > /dev/null; then continue; fi
    if ! apt-get download -q "$p" > /dev/null 2>&1; then
      apt-get update -q > /dev/null 2>&1 || true   # stale package lists give 404s
      apt-get download -q "$p" > /dev/null 2>&1 || failed+=("$p")
    fi
  done
  for p in "${failed[@]}"; do
    is_root=${is_root_pkg[$p]:-}
    [ -z "$is_root" ] || die "could not download $p, which the build needs"
    say "WARNING: could not download $p (a dependency; left out)"
  done
  # Files left by an earlier fetch of a different list or version.
  local f keep
  for f in *.deb; do
    keep=""
    for p in "${names[@]}"; do [ "${f%%_*}" = "$p" ] && keep=1; done
    [ -n "$keep" ] || { say "removing stale $f"; rm -f "$f"; }
  done

  # The highest glibc any package's Depends asks for: what the GPU machine needs.
  local glibc
  glibc=$(for f in *.deb; do dpkg-deb -f "$f" Depends Pre-Depends; done |
          grep -oE 'libc6 \(>= [0-9.]+' | grep -oE '[0-9.]+$' | sort -V | tail -n 1)
  {
    echo "# Written by scripts/gpu_bringup.sh fetch on $(date -u +%FT%TZ), $PRETTY_NAME ($(ldd --version | sed -n 1p))"
    echo "glibc_required=${glibc:-2.36}"
    echo "debian_glibc=$(dpkg-query -W -f='${Version}' libc6 | grep -oE '^[0-9]+\.[0-9]+')"
    for f in *.deb; do
      printf 'deb %s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" "$(stat -c %s "$f")"
    done
  } > MANIFEST
  cd "$root"

  # ../shared does not travel to the GPU machine: the tarballs go in a carried folder.
  local third_party=${MINIATTN_THIRD_PARTY:-$root/../shared/third_party}
  if [ -f "$third_party/SHA256SUMS" ]; then
    mkdir -p "$deps/third_party"
    cp -u "$third_party/SHA256SUMS" "$third_party"/kokkos-4.6.01.tar.gz \
          "$third_party"/kokkos-kernels-4.6.02.tar.gz "$third_party"/cudnn-frontend-1.23.0.tar.gz \
          "$third_party"/kokkos-tools-*.tar.gz "$deps/third_party/"
  else
    say "WARNING: no $third_party/SHA256SUMS: the GPU machine must find the Kokkos tarballs itself"
  fi

  local debs_size tp_size tree_size
  debs_size=$(du -sb "$debs" | cut -f1)
  tp_size=$( (du -sb "$deps/third_party" 2>/dev/null || echo 0) | cut -f1)
  tree_size=$(cd "$root" && { git ls-files -z --cached --others --exclude-standard |
                               xargs -0 stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
  say "build-deps/debs: $(find "$debs" -name "*.deb" | wc -l) packages, $((debs_size / 1024)) KiB; glibc needed: ${glibc:-2.36}"
  say "build-deps/third_party: $((tp_size / 1024)) KiB; working tree: $((tree_size / 1024)) KiB"
  say "to carry: build-deps/debs build-deps/third_party; total $(((debs_size + tp_size + tree_size) / 1048576)) MiB of the 64 MiB"
  [ $((debs_size + tp_size + tree_size)) -lt $((60 * 1048576)) ] || die "over 60 MiB: too close to the 64 MiB limit"
}

# --------------------------------------------------------- GPU machine: check
manifest_value() { sed -n "s/^$1=//p" "$debs/MANIFEST" 2>/dev/null | sed -n 1p; }

check_platform() {
  [ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the Debian packages are amd64 (x86_64)"
  local have need
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}') || true
  [ -n "$have" ] || die "no GNU C library here (musl or another libc?): Debian 12's libraries cannot run on it"
  need=$(manifest_value glibc_required)
  need=${need:-2.36}
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | sed -n 1p)" != "$need" ]; then
    die "this machine's glibc is $have, older than the $need the Debian 12 packages need: they cannot work here." \
        "Install MPICH and parallel HDF5 for this OS instead and pass their paths to CMake."
  fi
  say "glibc $have (the packages need >= $need)"
}

find_python() {
  local c
  for c in ${MINIATTN_PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$c" > /dev/null && "$c" -c 'import torch, h5py, numpy' 2> /dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

third_party_dir() {
  local d
  for d in ${MINIATTN_THIRD_PARTY:-} "$root/../shared/third_party" "$deps/third_party"; do
    [ -f "$d/SHA256SUMS" ] && { (cd "$d" && pwd); return 0; }
  done
  return 1
}

step_check() {
  # shellcheck disable=SC1091
  say "machine: $(uname -srm); $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo 'unknown OS')"
  check_platform
  local t missing=()
  for t in cmake gcc "${CXX:-g++}" tar; do command -v "$t" > /dev/null || missing+=("$t"); done
  command -v make > /dev/null || command -v ninja > /dev/null || missing+=("make or ninja")
  command -v dpkg-deb > /dev/null || command -v ar > /dev/null || missing+=("dpkg-deb or ar")
  [ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]}"
  say "$(cmake --version | sed -n 1p); $("${CXX:-g++}" --version | sed -n 1p)"
  [ -x "$cuda_home/bin/nvcc" ] || die "no nvcc at $cuda_home/bin/nvcc (set CUDA_HOME)"
  say "nvcc: $("$cuda_home/bin/nvcc" --version | grep -o "release [0-9.]*, V[0-9.]*")"
  [ -n "$(find "$cuda_home/include" /usr/include -maxdepth 1 -name nccl.h 2>/dev/null | sed -n 1p)" ] ||
    die "no nccl.h under $cuda_home/include or /usr/include: the build enables the NCCL backend (set NCCL_ROOT)"
  if command -v nvidia-smi > /dev/null; then
    say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed -n 1p)"
  else
    say "WARNING: no nvidia-smi: the test, train and bench steps need a GPU"
  fi
  local py
  py=$(find_python) || die "no Python that imports torch, h5py and numpy (set MINIATTN_PYTHON)"
  say "python: $py: $("$py" -c 'import sys, torch, h5py, numpy
print("Python %s, torch %s (CUDA %s, GPU %s), h5py %s, numpy %s" % (sys.version.split()[0], torch.__version__,
      torch.version.cuda, torch.cuda.is_available(), h5py.__version__, numpy.__version__))')"
  [ -f "$debs/MANIFEST" ] && compgen -G "$debs/*.deb" > /dev/null ||
    die "no packages in $debs: run 'scripts/gpu_bringup.sh fetch' on Debian 12 and carry build-deps/debs"
  say "$(find "$debs" -name "*.deb" | wc -l) packages in $debs"
  local tp
  tp=$(third_party_dir) || die "no Kokkos tarballs (SHA256SUMS) in ../shared/third_party or build-deps/third_party: carry build-deps/third_party"
  say "Kokkos tarballs: $tp"
}

# -------------------------------------------------------- GPU machine: unpack
extract_deb() {  # deb dest listfile
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb --fsys-tarfile "$1" | tar -xv -C "$2" > "$3"
  else
    local tmp data
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$1")
    data=$(ls "$tmp"/data.tar.*)
    tar -xvf "$data" -C "$2" > "$3"
    rm -rf "$tmp"
  fi
}

unpack_stamp() {
  (cd "$debs" && find . -name '*.deb' -printf '%s %f\n' | sort
   system_sonames) | sha256sum | cut -d' ' -f1   # the run-time folder depends on them
}

system_sonames() {
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true; } | awk 'NR > 1 {print $1}' | sort -u
}

step_unpack() {
  check_platform
  local stamp
  stamp=$(unpack_stamp)
  if [ -f "$debroot/.stamp" ] && [ "$(cat "$debroot/.stamp")" = "$stamp" ]; then
    say "$debroot is complete"
    return 0
  fi
  rm -rf "$debroot"
  mkdir -p "$debroot/.files" "$runtime_lib"
  local f pkg
  for f in "$debs"/*.deb; do
    pkg=$(basename "$f"); pkg=${pkg%%_*}
    extract_deb "$f" "$debroot" "$debroot/.files/$pkg"
  done
  say "unpacked $(find "$debs" -name "*.deb" | wc -l) packages into $debroot"

  # Absolute links (e.g. libz.so -> /lib/...libz.so.1.2.13) must stay inside the tree.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    if [[ $target == /* ]] && [ -e "$debroot$target" ]; then ln -sfn "$debroot$target" "$link"; fi
  done < <(find "$debroot" -type l -print0)

  # The run-time library folder (LD_LIBRARY_PATH). MPICH, HDF5 and yaml-cpp
  # always come from here; any other library only when this machine lacks its
  # soname, so that Python, PyTorch and the system keep their own (newer)
  # zlib, curl, ssl, udev, ... and nothing of theirs is shadowed.
  local system_sonames name stem own
  system_sonames=$(system_sonames)
  for pkg in "$debroot"/.files/*; do
    pkg=$(basename "$pkg")
    own=""
    [[ $pkg =~ ^(libmpich12|libhdf5-mpich-.*|libyaml-cpp0\..*)$ ]] && own=1
    while read -r f; do
      f=${f#./}
      [[ $f =~ ^(usr/)?lib/$triplet/lib[^/]*\.so\.[0-9] ]] || continue
      name=$(basename "$f")
      stem=$(echo "$name" | sed -E 's/(\.so\.[0-9]+).*/\1/')
      if [ -n "$own" ] || ! grep -qxF "$stem" <<< "$system_sonames"; then
        ln -sfn "$debroot/$f" "$runtime_lib/$name"
      fi
    done < "$debroot/.files/$pkg"
  done
  # UCX finds its transport modules beside libucs.
  [ ! -e "$runtime_lib/libucs.so.0" ] || ln -sfn "$debroot/usr/lib/$triplet/ucx" "$runtime_lib/ucx"
  # The names Debian's alternatives would give (dpkg -x sets none), for use by hand.
  ln -sfn mpiexec.hydra "$debroot/usr/bin/mpiexec"
  ln -sfn mpiexec.hydra "$debroot/usr/bin/mpirun"
  say "run-time libraries taken from the packages: $(find "$runtime_lib" -name 'lib*.so.*' | wc -l)" \
      "(the rest of the packages' sonames this machine has itself)"

  setup_env
  # Every library and launcher the build uses must resolve, glibc and libstdc++ symbol versions included.
  command -v ldd > /dev/null || die "no ldd here (glibc's libc-bin): cannot check the Debian libraries"
  local problems
  problems=$(for f in "$debroot/usr/lib/$triplet/libmpich.so.12" "$debroot/usr/lib/$triplet/libhdf5_mpich.so.103" \
                      "$debroot/usr/lib/$triplet"/libyaml-cpp.so.0.* "$debroot/usr/bin/mpiexec.hydra" \
                      "$debroot/usr/bin/hydra_pmi_proxy"; do
               [ -L "$f" ] && continue
               ldd "$f" 2>&1 | grep -E 'not found|No such' | sed "s|^|$(basename "$f"): |" || true
             done | sort -u)
  [ -z "$problems" ] || die "the Debian 12 libraries cannot work on this machine:"$'\n'"$problems"
  smoke_test
  echo "$stamp" > "$debroot/.stamp"
  say "unpack complete"
}

# MPI_Init on 2 ranks, and a file created through HDF5's MPI-IO driver.
smoke_test() {
  local dir=$debroot/smoke
  mkdir -p "$dir"
  cat > "$dir/smoke.c" << 'EOF'
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, len;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_library_version(version, &len);
  version[strcspn(version, "\n")] = 0;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t file = H5Fcreate(argc > 1 ? argv[1] : "smoke.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  int ok = file >= 0 && H5Fclose(file) >= 0, all = 0;
  H5Pclose(fapl);
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  if (rank == 0) printf("smoke: %d ranks, parallel HDF5 %u.%u.%u file %s; %s\n", size, maj, min, rel,
                        all == size ? "ok" : "FAILED", version);
  MPI_Finalize();
  return all == size ? 0 : 1;
}
EOF
  gcc -o "$dir/smoke" "$dir/smoke.c" -I"$debroot/usr/include/$triplet/mpich" -I"$debroot/usr/include/hdf5/mpich" \
      "$debroot/usr/lib/$triplet/hdf5/mpich/libhdf5.so" "$debroot/usr/lib/$triplet/libmpich.so" ||
    die "cannot compile an MPI + HDF5 program against $debroot"
  # Hydra reaches its proxy through the host name, which a VM may not resolve:
  # fall back to the loopback interface and the fork launcher.
  local attempt
  for attempt in "" "HYDRA_IFACE=lo" "HYDRA_IFACE=lo HYDRA_LAUNCHER=fork" \
                 "HYDRA_IFACE=lo HYDRA_LAUNCHER=fork UCX_TLS=self,sm,tcp"; do
    # shellcheck disable=SC2086
    if (cd "$dir" && env $attempt timeout 60 mpiexec.hydra -n 2 ./smoke "$dir/smoke.h5"); then
      printf '%s\n' $attempt | grep . > "$debroot/mpi.env" || true
      say "MPI works${attempt:+ with $attempt}"
      return 0
    fi
    say "mpiexec -n 2 failed${attempt:+ with $attempt}"
  done
  die "MPICH from the Debian packages does not start 2 ranks here (see the messages above)"
}

# cuDNN as PyTorch's nvidia-cudnn wheel installs it (include/cudnn.h and
# lib/libcudnn.so.9 under site-packages/nvidia/...), or CUDNN_ROOT.
cudnn_root() {
  local py header
  if [ -n "${CUDNN_ROOT:-}" ]; then echo "$CUDNN_ROOT"; return 0; fi
  py=$(find_python) || return 1
  header=$("$py" -c '
import glob, os, site
for root in site.getsitepackages() + [site.getusersitepackages()]:
    found = sorted(glob.glob(os.path.join(root, "nvidia", "**", "include", "cudnn.h"), recursive=True))
    if found:
        print(found[0])
        break' 2> /dev/null) || return 1
  [ -n "$header" ] || return 1
  dirname "$(dirname "$header")"
}

setup_env() {
  [ -d "$runtime_lib" ] || die "$debroot is not unpacked: run 'scripts/gpu_bringup.sh unpack' first"
  export PATH="$debroot/usr/bin:$cuda_home/bin:$PATH"
  export LD_LIBRARY_PATH="$runtime_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # miniattn loads libcudnn.so.9 at run time (kernels.attention: cudnn).
  local cudnn
  if cudnn=$(cudnn_root) && [ -d "$cudnn/lib" ]; then export LD_LIBRARY_PATH="$cudnn/lib:$LD_LIBRARY_PATH"; fi
  # CMake's default generator needs make; the CUDA images have ninja.
  if ! command -v make > /dev/null && command -v ninja > /dev/null; then export CMAKE_GENERATOR=Ninja; fi
  # pkg-config sees the unpacked packages only: the image's own Open MPI has .pc
  # files in /usr, and CMake's FindMPI took it through them although told to use
  # MPICH (a binary linking both died in MPI_Comm_create_keyval).
  export PKG_CONFIG_LIBDIR="$debroot/usr/lib/$triplet/pkgconfig:$debroot/usr/share/pkgconfig"
  unset PKG_CONFIG_PATH
  local kv
  if [ -f "$debroot/mpi.env" ]; then
    while read -r kv; do if [ -n "$kv" ]; then export "${kv?}"; fi; done < "$debroot/mpi.env"
  fi
}

# The unpacked wrappers (mpicxx, h5pcc) carry /usr paths, so CMake is told every location itself.
cmake_args() {
  local lib=$debroot/usr/lib/$triplet
  printf '%s\n' \
    -DCMAKE_PREFIX_PATH="$debroot/usr" \
    -DMPI_ASSUME_NO_BUILTIN_MPI=ON -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON \
    -DMPI_C_HEADER_DIR="$debroot/usr/include/$triplet/mpich" -DMPI_CXX_HEADER_DIR="$debroot/usr/include/$triplet/mpich" \
    -DMPI_C_LIB_NAMES=mpich -DMPI_CXX_LIB_NAMES=mpich -DMPI_mpich_LIBRARY="$lib/libmpich.so" \
    -DMPIEXEC_EXECUTABLE="$debroot/usr/bin/mpiexec.hydra" \
    -DHDF5_ROOT="$lib/hdf5/mpich" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON \
    -Dyaml-cpp_DIR="$lib/cmake/yaml-cpp" -Dnlohmann_json_DIR="$debroot/usr/share/cmake/nlohmann_json" \
    -DCLI11_DIR="$debroot/usr/share/cmake/CLI11" -DGTest_DIR="$lib/cmake/GTest" \
    -DZLIB_INCLUDE_DIR="$debroot/usr/include" -DZLIB_LIBRARY="$lib/libz.so"
}

# ---------------------------------------------------- GPU machine: build, run
step_kokkos() {
  setup_env
  MINIATTN_THIRD_PARTY=$(third_party_dir) || die "no Kokkos tarballs: carry build-deps/third_party"
  export MINIATTN_THIRD_PARTY
  "$root/scripts/build_kokkos.sh" cuda
}

step_build() {
  setup_env
  MINIATTN_THIRD_PARTY=$(third_party_dir) || die "no Kokkos tarballs: carry build-deps/third_party"
  export MINIATTN_THIRD_PARTY MINIATTN_BUILD_DIR=$build
  local py args
  py=$(find_python) || die "no Python with torch, h5py and numpy (set MINIATTN_PYTHON)"
  mapfile -t args < <(cmake_args)
  local cudnn
  if cudnn=$(cudnn_root); then
    say "cuDNN: $cudnn"
    args+=(-DCUDNN_ROOT="$cudnn" -DMINIATTN_ENABLE_CUDNN=ON)
  else
    say "WARNING: no cuDNN found (PyTorch's nvidia-cudnn wheel or CUDNN_ROOT): kernels.attention cudnn not built"
  fi
  "$root/scripts/build_cuda.sh" "${args[@]}" -DMINIATTN_VALIDATION_PYTHON="$py" -DPython3_EXECUTABLE="$py"
  local v
  for v in MPI_mpich_LIBRARY MPI_C_HEADER_DIR HDF5_hdf5_LIBRARY_RELEASE HDF5_C_INCLUDE_DIR MPIEXEC_EXECUTABLE; do
    grep -E "^$v:" "$build/CMakeCache.txt" || true
  done
  grep -E '^(MPI_mpich_LIBRARY|MPI_C_HEADER_DIR|HDF5_hdf5_LIBRARY_RELEASE|HDF5_C_INCLUDE_DIR):.*=' "$build/CMakeCache.txt" | grep -qv "$debroot" &&
    die "$build resolved MPI or HDF5 outside $debroot (an older CMakeCache.txt?): remove $build and rebuild"
  [ -x "$build/src/miniattn" ] && [ -x "$build/tests/attention/bench_attention" ] ||
    die "build finished without $build/src/miniattn or tests/attention/bench_attention"
  # One MPI in the binary: MPICH's libmpich, none of another MPI's libmpi.
  ldd "$build/src/miniattn" | grep -E '(^|[[:space:]/])libmpi\.so' &&
    die "$build/src/miniattn links another MPI's libmpi beside MPICH: remove $build and rebuild"
  ldd "$build/src/miniattn" | grep -q 'libmpich\.so' || die "$build/src/miniattn does not link MPICH's libmpich"
}

# Every rank shares the one GPU (Kokkos puts them all on device 0). Debian's
# MPICH is not GPU-aware, so miniattn stages its MPI exchanges through host
# buffers (parallel.gpu_aware_mpi: auto), and multi-rank tests run as on a CPU.
# Left out: the NCCL test (NCCL needs one GPU per rank) and the Slurm test.
step_test() {
  setup_env
  cd "$build"
  ctest --output-on-failure --no-tests=error -j 12 --timeout 900 -R "${MINIATTN_GPU_TESTS:-.}" \
        -E '^slurm[.]|^test_nccl_comm[.]'
}

miniattn() { mpiexec.hydra -n 1 "$build/src/miniattn" "$@"; }

# The cuDNN attention path on the GPU: the reference checks of every strategy
# with kernels.attention cudnn, two identical runs bitwise equal, the bf16
# kernel tests with real cuDNN calls (test_attention's cudnn suite,
# test_cudnn_attention, the graphs), and one 1-rank training run with NCCL
# (NCCL wants one GPU per rank: one rank is all one GPU shows), its
# communicators nonblocking and every wait under a 60 s exchange deadline.
step_cudnn() {
  setup_env
  grep -q '^MINIATTN_ENABLE_CUDNN:BOOL=ON' "$build/CMakeCache.txt" || die "$build was built without cuDNN"
  cudnn_inventory
  cd "$build"
  ctest --output-on-failure --no-tests=error -j 8 --timeout 900 -R '(cudnn|^test_attention[.])'
  miniattn "$root/inputs/example.yaml" --set model.precision=bf16 --set kernels.attention=cudnn \
           --set parallel.comm=nccl --set parallel.strategy=local --set parallel.layout=contiguous \
           --set run.exchange_timeout_s=60 --set run.result="$results/train_cudnn_nccl.json"
}

# Every libcudnn.so.9 on this machine with its cudnnGetVersion(), and the one a
# process started here loads (LD_LIBRARY_PATH first): a machine may hold several.
cudnn_inventory() {
  local py
  py=$(find_python) || return 0
  "$py" - << 'EOF' || true
import ctypes, glob, os, site
roots = ["/usr/local/cuda", "/usr/lib/x86_64-linux-gnu", "/opt"] + site.getsitepackages()
paths = set()
for root in roots:
    paths.update(glob.glob(os.path.join(root, "**", "libcudnn.so.9*"), recursive=True))
for path in sorted(p for p in paths if not os.path.islink(p)):
    try:
        print("gpu_bringup: cuDNN %d at %s" % (ctypes.CDLL(path).cudnnGetVersion(), path))
    except OSError as e:
        print("gpu_bringup: cannot load %s: %s" % (path, e))
try:
    print("gpu_bringup: libcudnn.so.9 by name (what miniattn loads): cuDNN %d" % ctypes.CDLL("libcudnn.so.9").cudnnGetVersion())
except OSError as e:
    print("gpu_bringup: libcudnn.so.9 by name does not load: %s" % e)
EOF
}

step_train() {
  setup_env
  miniattn "$root/inputs/example.yaml" --set parallel.strategy=local --set parallel.layout=contiguous \
           --set run.result="$results/train_example.json"
}

step_reference() {
  setup_env
  local py kind causal
  py=$(find_python) || die "no Python with torch, h5py and numpy"
  # A model of production shape (Dh = 64, the backend's own tiles, N = 1024)
  # after one AdamW update: GPU kernels, cuBLAS and the snapshot all in fp64.
  for kind in causal noncausal; do
    causal=$([ $kind = causal ] && echo true || echo false)
    "$py" "$root/validation/run_reference_check.py" --snapshot "$results/reference_fp64_$kind.h5" --expect pass -- \
      "$(command -v mpiexec.hydra)" -n 1 "$build/src/miniattn" "$root/tests/decks/reference_small.yaml" \
      --set io.snapshot="$results/reference_fp64_$kind.h5" --set io.snapshot_step=1 \
      --set model.precision=fp64 --set model.causal="$causal" --set model.vocab=256 --set model.d_model=256 \
      --set model.heads=4 --set model.ffn=0 --set model.seq_len=1024 --set model.batch=2 \
      --set kernels.query_block=0 --set kernels.key_block=0
  done
}

# The model of the PyTorch comparison (validation/compare_pytorch.py's defaults):
# V = D = 256, H = 4 (Dh = 64), L = 2, FFN 1024, B = 1, fp32, AdamW, clip 1.0.
bench_model=(--set model.vocab=256 --set model.d_model=256 --set model.heads=4 --set model.ffn=0
             --set model.layers=2 --set model.batch=1 --set model.precision=fp32 --set model.positions=learned
             --set data.task=copy --set parallel.strategy=local
             --set parallel.layout=contiguous --set parallel.dp=1 --set train.steps=8 --set train.lr=1e-3
             --set train.weight_decay=0.01 --set train.grad_clip=1.0 --set run.mode=bench)

step_bench() {
  setup_env
  local py n causal
  # A short lease can narrow the fp32 part (the bf16 part is N = 32768 only):
  # MINIATTN_BENCH_SEQ_LENS="32768" MINIATTN_BENCH_FP32_KERNELS="gemm".
  local -a seq_lens fp32_kernels
  read -r -a seq_lens <<< "${MINIATTN_BENCH_SEQ_LENS:-8192 32768}"
  read -r -a fp32_kernels <<< "${MINIATTN_BENCH_FP32_KERNELS:-gemm fused}"
  py=$(find_python) || die "no Python with torch, h5py and numpy"
  # First, so that a failing miniattn kernel below still leaves the figures to compare with.
  say "PyTorch on the same GPU: SGEMM, SDPA, one training step of validation/reference_model.py (fp32 and bf16)"
  "$py" "$root/scripts/gpu_reference_bench.py" --seq-lens "${seq_lens[@]}" --heads 4 --head-dim 64 \
    --train-seq-len 32768 --bf16 > "$results/reference_bench.json"
  local kernel
  for n in "${seq_lens[@]}"; do
    for kernel in "${fp32_kernels[@]}"; do
      say "bench_attention n=$n Dh=64 H=4 fp32, $kernel kernel (reference GEMM 8192^3)"
      "$build/tests/attention/bench_attention" "$n" 64 4 --precision=fp32 --reps=5 --gemm=8192 --kernel="$kernel" |
        tee "$results/bench_attention_${kernel}_n$n.txt"
    done
  done
  for n in "${seq_lens[@]}"; do
    for causal in true false; do
      for kernel in "${fp32_kernels[@]}"; do
        say "miniattn bench N=$n causal=$causal, $kernel kernel"
        miniattn "$root/inputs/example.yaml" "${bench_model[@]}" --set model.seq_len="$n" --set model.causal=$causal \
                 --set kernels.attention="$kernel" --set run.result="$results/bench_miniattn_${kernel}_n${n}_$(
                   [ $causal = true ] && echo causal || echo noncausal).json"
      done
    done
  done
  # bf16 (model.precision bf16): the gemm kernel, and cudnn in a build with cuDNN; bench_attention
  # first compares cudnn with gemm on the same operands (exit 1 on a mismatch). A failure is
  # reported, not fatal: the runs after it still go.
  local bf16_kernels=(gemm)
  if grep -q '^MINIATTN_ENABLE_CUDNN:BOOL=ON' "$build/CMakeCache.txt"; then bf16_kernels+=(cudnn); fi
  for kernel in "${bf16_kernels[@]}"; do
    say "bench_attention n=32768 Dh=64 H=4 bf16, $kernel kernel (reference bf16 GEMM 8192^3)"
    "$build/tests/attention/bench_attention" 32768 64 4 --precision=bf16 --reps=5 --gemm=8192 --kernel=$kernel |
      tee "$results/bench_attention_bf16_${kernel}_n32768.txt" || say "WARNING: bench_attention $kernel exit $?"
    say "miniattn bench N=32768 causal bf16, $kernel kernel"
    miniattn "$root/inputs/example.yaml" "${bench_model[@]}" --set model.seq_len=32768 --set model.causal=true \
             --set model.precision=bf16 --set kernels.attention=$kernel \
             --set run.result="$results/bench_miniattn_bf16_${kernel}_n32768_causal.json" ||
      say "WARNING: miniattn bench $kernel exit $?"
  done
  # What the deterministic backward costs, and the wider heads of the cuDNN
  # target (H = 16, Dh = 128) beside PyTorch SDPA on the same shape.
  if [[ " ${bf16_kernels[*]} " == *" cudnn "* ]]; then
    "$build/tests/attention/bench_attention" 32768 64 4 --precision=bf16 --reps=5 --gemm=8192 --kernel=cudnn \
      --cudnn-nondeterministic | tee "$results/nondeterministic_bench_attention_bf16_cudnn_n32768.txt" ||
      say "WARNING: bench_attention cudnn non-deterministic exit $?"
    "$build/tests/attention/bench_attention" 32768 128 16 --precision=bf16 --reps=3 --gemm=8192 --kernel=cudnn |
      tee "$results/wide_bench_attention_bf16_cudnn_n32768.txt" || say "WARNING: bench_attention cudnn H=16 exit $?"
    "$build/tests/attention/bench_attention" 32768 128 16 --precision=bf16 --reps=3 --gemm=8192 --kernel=cudnn \
      --cudnn-nondeterministic | tee "$results/wide_nondeterministic_bench_attention_bf16_cudnn_n32768.txt" ||
      say "WARNING: bench_attention cudnn H=16 non-deterministic exit $?"
    "$py" "$root/scripts/gpu_reference_bench.py" --seq-lens 32768 --heads 16 --head-dim 128 --sdpa-bf16-only \
      > "$results/wide_reference_bench.json" || say "WARNING: PyTorch SDPA H=16 failed"
  fi
  "$py" "$root/scripts/gpu_reference_bench.py" summarize --results "$results"
}

# Long sequences in bf16 (docs/gpu_bringup.md, "long"): run.mode calibrate in
# bf16 with the cudnn kernel (h200-bf16.yaml: commit it as
# inputs/machines/h200-bf16.yaml); inputs/long_bf16_1m.yaml (N = 1,048,576, one
# rank) in both backward modes; predict's longest N under 16 GiB run, and one
# increment more refused before any work; PyTorch's step at a million tokens
# (or where it runs out of memory); predicted against measured steps. A
# failing run is reported, not fatal: the runs after it still go.
step_long() {
  setup_env
  local py machine=$results/h200-bf16.yaml deck=$root/inputs/long_bf16_1m.yaml det n16 rc
  py=$(find_python) || die "no Python with torch, h5py and numpy"
  grep -q '^MINIATTN_ENABLE_CUDNN:BOOL=ON' "$build/CMakeCache.txt" || die "$build was built without cuDNN"
  cudnn_inventory
  say "calibrate: bf16, cudnn attention, the bench model at N = 32768"
  miniattn "$root/inputs/example.yaml" "${bench_model[@]}" --set model.precision=bf16 --set kernels.attention=cudnn            --set model.seq_len=32768 --set model.causal=true --set run.mode=calibrate --set run.machine="$machine"            --set run.result="$results/calibrate_bf16.json" || say "WARNING: calibrate exit $?"
  for det in true false; do
    say "a million tokens, kernels.deterministic $det"
    miniattn "$deck" --set kernels.deterministic=$det --set run.mode=bench --set train.steps=3              --set run.result="$results/long_1m_deterministic_$det.json" || say "WARNING: 1M run exit $?"
  done
  say "PyTorch eager + SDPA-cuDNN under bf16 autocast at a million tokens"
  "$py" "$root/scripts/gpu_reference_bench.py" --train-step-only eager_sdpa_cudnn_bf16 --train-seq-len 1048576         --train-steps 3 > "$results/pytorch_1m.json" || say "WARNING: PyTorch at 1M exit $?"
  [ -f "$machine" ] || { say "WARNING: no calibrated machine file: no predictions"; return 0; }
  long_predictions "$machine" "$deck"
  n16=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["longest_seq_len"][0]["strategies"]["local"])'         "$results/predict_1m_16gib.json") || { say "WARNING: no longest N under 16 GiB"; return 0; }
  say "predict's longest N under 16 GiB: $n16; it runs, and $((n16 + 2)) is refused before any work"
  miniattn "$deck" --set model.seq_len="$n16" --set run.memory_per_rank_gib=16 --set run.mode=bench            --set train.steps=2 --set run.result="$results/long_16gib.json" || say "WARNING: the 16 GiB run exit $?"
  if miniattn "$deck" --set model.seq_len=$((n16 + 2)) --set run.memory_per_rank_gib=16        > "$results/long_16gib_plus.txt" 2>&1; then rc=0; else rc=$?; fi
  say "one increment more: exit $rc (2 expected): $(grep -m1 -o 'this run needs.*' "$results/long_16gib_plus.txt")"
  "$py" "$root/scripts/gpu_reference_bench.py" summarize --results "$results"
}

# Packed documents on cuDNN (docs/gpu_bringup.md, "documents"): the ways the
# cudnn kernel could run them, timed beside one causal call over the whole
# block, the ragged ones checked against a call per document. A failing run is
# reported, not fatal.
step_documents() {
  setup_env
  grep -q '^MINIATTN_ENABLE_CUDNN:BOOL=ON' "$build/CMakeCache.txt" || die "$build was built without cuDNN"
  local mode py
  py=$(find_python) || die "no Python with torch, h5py and numpy"
  for mode in deterministic nondeterministic; do
    say "packed documents on cuDNN, $mode backward (N = 32768, Dh = 64, H = 4)"
    "$build/tests/attention/bench_cudnn_documents" 32768 64 4 $([ $mode = deterministic ] || echo --nondeterministic) |
      tee "$results/documents_cudnn_$mode.txt" || say "WARNING: bench_cudnn_documents $mode exit $?"
  done
  # The bench step with packed documents, their blocks on the gemm kernel and as calls per document.
  for mode in gemm calls; do
    say "miniattn bench N=32768 causal bf16 cudnn, packed documents, kernels.cudnn_documents $mode"
    miniattn "$root/inputs/example.yaml" "${bench_model[@]}" --set model.seq_len=32768 --set model.causal=true \
             --set model.precision=bf16 --set kernels.attention=cudnn --set data.documents=true \
             --set kernels.cudnn_documents=$mode --set train.steps=4 \
             --set run.result="$results/bench_documents_cudnn_$mode.json" || say "WARNING: documents $mode exit $?"
  done
  "$py" "$root/scripts/gpu_reference_bench.py" summarize --results "$results"
}

# Predict on the calibrated file: the 32768 bench step, the million-token
# step in both modes, and the longest N under 16 GiB (predict_*.json).
long_predictions() {
  local machine=$1 deck=$2 det
  miniattn "$root/inputs/example.yaml" "${bench_model[@]}" --set model.precision=bf16 --set model.seq_len=32768            --set model.causal=true --set run.mode=predict --set run.machine="$machine"            --set run.predict_max_ranks=1 --set run.predict_seq_lens=32768 |
    sed -n 's/^RESULT //p' > "$results/predict_32768.json" || say "WARNING: predict 32768 exit $?"
  for det in true false; do
    miniattn "$deck" --set kernels.deterministic=$det --set run.mode=predict --set run.machine="$machine"              --set run.predict_max_ranks=1 --set run.predict_seq_lens=1048576 |
      sed -n 's/^RESULT //p' > "$results/predict_1m_deterministic_$det.json" || say "WARNING: predict 1M exit $?"
  done
  miniattn "$deck" --set run.mode=predict --set run.machine="$machine" --set run.memory_per_rank_gib=16            --set run.predict_max_ranks=1 --set run.predict_seq_lens=1048576 |
    sed -n 's/^RESULT //p' > "$results/predict_1m_16gib.json" || say "WARNING: predict 16 GiB exit $?"
}

# Where the bf16 step's time goes outside attention: the bench deck's bf16
# cudnn step (N = 32768) under Kokkos Tools' simple kernel timer, every kernel
# and region by its label, printed by kp_reader (kernel_timer_bf16_cudnn.txt).
# The tools build from their tarball (carried in build-deps/third_party) with
# the unpacked MPICH. Not in `all`: run it by name.
step_kernels() {
  setup_env
  local mpich="-I$debroot/usr/include/$triplet/mpich -L$debroot/usr/lib/$triplet -Wl,--no-as-needed -lmpich"
  MINIATTN_THIRD_PARTY=$(third_party_dir) || die "no tarballs: carry build-deps/third_party"
  MINIATTN_THIRD_PARTY=$MINIATTN_THIRD_PARTY MPICXX="${CXX:-g++} $mpich" "$root/scripts/build_kokkos.sh" tools
  local tools=$deps/kokkos-tools dir=$results/kernel_timer
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && KOKKOS_TOOLS_LIBS=$tools/kp_kernel_timer.so miniattn "$root/inputs/example.yaml" "${bench_model[@]}" \
     --set model.seq_len=32768 --set model.causal=true --set model.precision=bf16 --set kernels.attention=cudnn)
  "$tools/kp_reader" "$dir"/*.dat > "$results/kernel_timer_bf16_cudnn.txt"
  head -n 60 "$results/kernel_timer_bf16_cudnn.txt"
}

# The bf16 cudnn step kernel by kernel: Nsight Compute times every launch of
# the bench deck's bf16 cudnn run (one metric, its duration: exact, no fences,
# cuBLAS's and cuDNN's kernels too), scripts/step_kernels.py sums the second
# step by kernel, and puts PyTorch's step (torch.profiler) beside it
# (step_kernels.txt). Not in `all`: run it by name.
step_stepkernels() {
  setup_env
  local py
  py=$(find_python) || die "no Python with torch"
  command -v ncu > /dev/null || die "no ncu (Nsight Compute) on PATH"
  ncu --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv --print-units base \
      "$(command -v mpiexec.hydra)" -n 1 "$build/src/miniattn" "$root/inputs/example.yaml" "${bench_model[@]}" \
      --set model.seq_len=32768 --set model.causal=true --set model.precision=bf16 --set kernels.attention=cudnn \
      --set train.steps=3 > "$results/ncu_step.csv"
  "$py" "$root/scripts/step_kernels.py" table --csv "$results/ncu_step.csv" > "$results/step_kernels.txt"
  "$py" "$root/scripts/step_kernels.py" pytorch >> "$results/step_kernels.txt"
  cat "$results/step_kernels.txt"
}

# Nsight Compute on cuDNN's fused-attention kernels as the cudnn kernel runs
# them (bench_attention, bf16, N = 8192 so that each replay is short; its
# first calls are the comparison with gemm, full then causal): occupancy, warp
# stall reasons, pipe and memory use of the first 6 launches whose names hold
# `sdpa` (cuDNN's cudnn_generated_fort_native_sdpa_sm90_flash_fprop_... and
# _bprop_... kernels and their helpers; Kokkos's and cuBLAS's kernels do not
# match), as text (ncu_cudnn.txt) and as a report for the Nsight Compute GUI.
# Beside it, the same sections of PyTorch SDPA's cuDNN backend on the same
# shape (ncu_sdpa.txt): a kernel that differs (tile, grid, duration) says the
# gap lies in the graph cuDNN picks, the same kernel says it lies around it.
# Clocks are left as the card has them (--clock-control none). Needs a build
# with cuDNN. Not in `all`: run it by name.
step_profile() {
  setup_env
  local py
  command -v ncu > /dev/null || die "no ncu (Nsight Compute) on PATH"
  grep -q '^MINIATTN_ENABLE_CUDNN:BOOL=ON' "$build/CMakeCache.txt" ||
    die "profile needs a build with cuDNN (MINIATTN_ENABLE_CUDNN=ON in $build)"
  ncu --clock-control none --kernel-name regex:'sdpa' --launch-count 6 \
      --set full --export "$results/ncu_cudnn" --force-overwrite \
      "$build/tests/attention/bench_attention" 8192 64 4 --precision=bf16 --reps=1 --kernel=cudnn
  ncu --import "$results/ncu_cudnn.ncu-rep" --print-details all > "$results/ncu_cudnn.txt"
  py=$(find_python) || die "no Python with torch"
  ncu --clock-control none --kernel-name regex:'sdpa|fmha|flash' --launch-count 4 \
      --section SpeedOfLight --section LaunchStats --section Occupancy \
      "$py" -c '
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(1, 4, 8192, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for causal in (False, True):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(torch.randn_like(o))
torch.cuda.synchronize()' > "$results/ncu_sdpa.txt"
  say "profile: $results/ncu_cudnn.txt and $results/ncu_sdpa.txt"
}

# ------------------------------------------------------------------ driver
# What the session's cudnn and bench steps run: the rest of the suite is left unbuilt.
session_targets="miniattn bench_attention bench_cudnn_documents test_attention test_cudnn_plan test_cudnn_graphs"
summary=$results/summary.txt

bundle_out() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  local f
  for f in summary.txt figures.md figures.json reference_bench.json h200-bf16.yaml ncu_cudnn.txt ncu_sdpa.txt; do
    [ ! -f "$results/$f" ] || cp "$results/$f" "$OUT/"
  done
  # The device returns at most 8 files: everything else travels as one tarball (snapshots left out).
  tar -czf "$OUT/gpu_bringup_results.tar.gz" -C "$(dirname "$results")" --exclude='*.h5' "$(basename "$results")"
}

run_steps() {
  mkdir -p "$results/logs"
  local step rc start
  for step in "$@"; do
    say "== step $step (log: $results/logs/$step.log)"
    start=$(date +%s)
    if "$self" _step "$step" 2>&1 | tee "$results/logs/$step.log"; then rc=0; else rc=${PIPESTATUS[0]}; fi
    if [ "$rc" -ne 0 ]; then
      echo "$(date -u +%FT%TZ) $step FAILED (exit $rc) after $(( $(date +%s) - start )) s: logs/$step.log" >> "$summary"
      bundle_out
      die "step '$step' FAILED (exit $rc); see $results/logs/$step.log and $summary"
    fi
    echo "$(date -u +%FT%TZ) $step ok $(( $(date +%s) - start )) s" >> "$summary"
  done
  say "steps done: $*; summary in $summary"
  bundle_out
}

case "${1:-all}" in
  fetch) fetch ;;
  cmake-args) cmake_args ;;
  session-targets) echo "$session_targets" ;;
  env) printf 'export PATH="%s:%s/bin:$PATH"\nexport LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n' \
              "$debroot/usr/bin" "$cuda_home" "$runtime_lib"
       [ ! -f "$debroot/mpi.env" ] || sed -n 's/^\(..*\)$/export \1/p' "$debroot/mpi.env" ;;
  _step) mkdir -p "$results"; "step_$2" ;;
  -h|--help|help) sed -n '3,/^set -E/{/^set -E/d; s/^# \{0,1\}//; p}' "$0" ;;
  all) run_steps "${all_steps[@]}" ;;
  session) export MINIATTN_BENCH_SEQ_LENS=${MINIATTN_BENCH_SEQ_LENS:-32768}
           export MINIATTN_BUILD_TARGETS=${MINIATTN_BUILD_TARGETS-$session_targets}
           export MINIATTN_BENCH_FP32_KERNELS=${MINIATTN_BENCH_FP32_KERNELS:-gemm}
           run_steps check unpack kokkos build cudnn bench ;;
  *)
    for s in "$@"; do
      [[ " ${all_steps[*]} cudnn profile kernels stepkernels long documents " == *" $s "* ]] ||
        die "unknown step '$s' (fetch, all, session, ${all_steps[*]}, cudnn, profile, kernels, stepkernels, long, documents, cmake-args, env)"
    done
    run_steps "$@" ;;
esac
