# shellcheck shell=bash
# Sourced (not run) by the scripts that build from the tarballs in the
# third-party folder (scripts/build_kokkos.sh, scripts/unpack_cudnn_frontend.sh):
# one place that decides which tarballs may be unpacked.
#
#   verify_tarballs NAME...
#
# Needs, set by the caller:
#   third_party         the folder with the tarballs and their SHA256SUMS
#   third_party_caller  the script's name, which starts every message
#   third_party_hint    what to do instead when a tarball is missing
# Exits the caller (status 1) unless every NAME is in the folder and matches its
# line in SHA256SUMS: nothing is ever built from an unchecked tarball.

# shellcheck disable=SC2154  # third_party, third_party_caller: set by the caller (above)
verify_tarballs() {
  [ -f "$third_party/SHA256SUMS" ] || {
    echo "$third_party_caller: $third_party/SHA256SUMS not found: refusing to build from unchecked tarballs" >&2
    exit 1
  }
  local name
  for name in "$@"; do
    [ -f "$third_party/$name" ] || {
      echo "$third_party_caller: $third_party/$name not found; set MINIATTN_THIRD_PARTY to the folder holding it" \
           "and SHA256SUMS${third_party_hint:+, $third_party_hint}" >&2
      exit 1
    }
    # A name without a line in SHA256SUMS is refused too: sha256sum --check sees no input.
    grep -qE " $name\$" "$third_party/SHA256SUMS" || {
      echo "$third_party_caller: $name has no checksum in $third_party/SHA256SUMS: refusing to build" >&2
      exit 1
    }
    (cd "$third_party" && grep -E " $name\$" SHA256SUMS | sha256sum --check --strict --quiet) || {
      echo "$third_party_caller: $name does not match SHA256SUMS: refusing to build" >&2
      exit 1
    }
  done
}
