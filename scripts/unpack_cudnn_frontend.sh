#!/usr/bin/env bash
# Unpacks cudnn-frontend 1.23.0 (NVIDIA's header-only C++ API over cuDNN's
# graph backend, MIT) from its tarball for kernels.attention: cudnn
# (cmake/MiniattnCudnn.cmake looks there by default).
#
#   scripts/unpack_cudnn_frontend.sh
#
# Prints the unpacked folder on stdout (its include/ holds cudnn_frontend.h);
# everything else goes to stderr, so `dir=$(scripts/unpack_cudnn_frontend.sh)`
# works. Where the tarball is absent it says so in one line, prints nothing on
# stdout and exits 0: the cuDNN path is optional and a build without it is
# complete.
#
# Environment (as scripts/build_kokkos.sh):
#   MINIATTN_THIRD_PARTY  folder with the tarball and SHA256SUMS
#                         (default ../shared/third_party beside the checkout)
#   MINIATTN_DEPS_DIR     where it is unpacked (default build-deps/ in the checkout)
#
# The tarball is checked against SHA256SUMS before it is unpacked; the folder
# keeps the checksum line as its stamp, and a later call with the same
# tarball only prints the folder. The source is never committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=cudnn-frontend-1.23.0
tarball=$name.tar.gz
third_party=${MINIATTN_THIRD_PARTY:-$root/../shared/third_party}
deps=${MINIATTN_DEPS_DIR:-$root/build-deps}
dest=$deps/$name
stamp=$dest/.miniattn-stamp

third_party_caller=unpack_cudnn_frontend
third_party_hint="or pass -DCUDNN_FRONTEND_ROOT=<a cudnn-frontend 1.23.0 checkout> to CMake"
# shellcheck source=scripts/third_party.sh
. "$root/scripts/third_party.sh"

stamp_text=$(grep -E " $tarball\$" "$third_party/SHA256SUMS" 2>/dev/null || true)
if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "$stamp_text" ] || [ ! -f "$third_party/$tarball" ]; }; then
  # Complete: unpacked earlier from a checked tarball (the same one, or the
  # only one there was, when the third-party folder is gone since).
  echo "$dest"
  exit 0
fi

if [ ! -f "$third_party/$tarball" ]; then
  echo "unpack_cudnn_frontend: no $third_party/$tarball: the cuDNN attention path (kernels.attention: cudnn)" \
       "will not be built; to build it, get the v1.23.0 tag of https://github.com/NVIDIA/cudnn-frontend" \
       "and pass -DCUDNN_FRONTEND_ROOT=<its folder> to CMake (or put the tarball and its SHA256SUMS line" \
       "in MINIATTN_THIRD_PARTY)" >&2
  exit 0
fi

verify_tarballs "$tarball"

# Unpacked beside its destination and moved into place, so that an
# interrupted call never leaves a folder that looks complete.
mkdir -p "$deps"
tmp=$(mktemp -d "$deps/.$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$third_party/$tarball" -C "$tmp"
[ -f "$tmp/$name/include/cudnn_frontend.h" ] || {
  echo "unpack_cudnn_frontend: $tarball has no $name/include/cudnn_frontend.h" >&2
  exit 1
}
printf '%s\n' "$stamp_text" > "$tmp/$name/.miniattn-stamp"
rm -rf "$dest"
mv "$tmp/$name" "$dest"
echo "unpack_cudnn_frontend: cudnn-frontend 1.23.0 headers in $dest/include" >&2
echo "$dest"
