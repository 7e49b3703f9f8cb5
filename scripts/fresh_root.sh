#!/usr/bin/env bash
# Runs commands of this project as a new user would on a fresh machine: in a
# bare Debian 12 root (debootstrap --variant=minbase bookworm, from the Debian
# archive this machine's apt uses: no compiler, no CMake, nothing the project's
# own scripts do not install), holding the committed tree only (git archive
# HEAD) with ../shared beside it. CI runs it first (.ci/run), so that a missing
# install step fails CI instead of a new user's first command.
#
#   scripts/fresh_root.sh               the README's two commands, read from
#                                       README.md's first bash block
#   scripts/fresh_root.sh openmpi       scripts/test_openmpi.sh: Debian's Open
#                                       MPI instead of MPICH, and the MPI tests
#   scripts/fresh_root.sh -- CMD ...    each CMD a bash command line, run in
#                                       the project's root
#
# As root (debootstrap, chroot and mounts need it). Each command prints
# "fresh_root: CMD rc=N Ns"; a command that fails prints the tail of its log;
# the exit status is 1 when any failed, 2 when the root could not be made. The
# commands run one after another in one root, each from a clean environment.
# Logs stay in $MINIATTN_FRESH_ROOT/run/logs. Only the bootstrap is cached
# ($MINIATTN_FRESH_ROOT, default /var/tmp/miniattn-fresh-root; about 6 GiB
# while a run builds): every run starts from a new copy of it, so nothing that
# a run installed survives it. The root gets its own mounts (a private mount
# namespace): proc, sys, dev, a tmpfs /dev/shm for MPI's shared memory, and
# this machine's /etc/hosts, /etc/hostname and /etc/resolv.conf (Slurm's test
# resolves its host's name; apt reaches the archive). MINIATTN_FRESH_APT_CACHE
# names a folder for the root's downloaded packages (.deb files, not installed
# ones), so that a second root of the same CI run need not download them again;
# CI makes it for the run and removes it after.
set -uo pipefail
die() { echo "fresh_root: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "run as root: it bootstraps a Debian root and chroots into it"
project=$(cd "$(dirname "$0")/.." && pwd)
git -C "$project" rev-parse --verify -q HEAD >/dev/null || die "$project is not a git checkout with a commit"
shared=$(cd "$project/../shared" 2>/dev/null && pwd) || shared=""
cache=${MINIATTN_FRESH_ROOT:-/var/tmp/miniattn-fresh-root}
apt_cache=${MINIATTN_FRESH_APT_CACHE:-}
if [ -n "$apt_cache" ]; then
  mkdir -p "$apt_cache/partial" && apt_cache=$(cd "$apt_cache" && pwd) || die "cannot make $apt_cache"
fi

readme_commands() {
  # The README's first bash block, without comments and blank lines.
  awk '/^```bash/{inside=1; next} inside && /^```/{exit} inside' "$project/README.md" \
    | sed 's/[[:space:]]*#.*$//' | sed '/^[[:space:]]*$/d'
}
case "${1:-}" in
  "") mapfile -t commands < <(readme_commands)
      [ ${#commands[@]} -gt 0 ] || die "README.md has no bash block of commands" ;;
  openmpi) commands=(scripts/test_openmpi.sh) ;;
  --) shift; commands=("$@"); [ ${#commands[@]} -gt 0 ] || die "no commands after --" ;;
  *) die "unknown argument '$1' (expected nothing, openmpi, or -- CMD ...)" ;;
esac

bootstrap() {
  local target=$cache/bootstrap mirror
  [ -x "$target/bin/bash" ] && [ -f "$target/.complete" ] && return 0
  command -v debootstrap >/dev/null \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends debootstrap; } >/dev/null \
    || die "debootstrap is missing and could not be installed"
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [ -n "$mirror" ] || die "no Debian archive in this machine's apt sources"
  echo "fresh_root: bootstrapping Debian 12 (minbase) from $mirror into $target"
  rm -rf "$target"; mkdir -p "$cache"
  debootstrap --variant=minbase bookworm "$target" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -5 "$cache/debootstrap.log"; die "debootstrap failed (log: $cache/debootstrap.log)"; }
  # The same archive as this machine (its sources file, security updates included).
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$target/etc/apt/sources.list.d/" && rm -f "$target/etc/apt/sources.list"
  fi
  touch "$target/.complete"
}

# Ends what the commands left running in the root (daemons of the Slurm test,
# MPI launchers), so that its folder can be removed.
end_processes_in() {
  local dir=$1 pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$dir" ] && kill -9 "$pid" 2>/dev/null
  done
  return 0
}

bootstrap
root=$cache/run
end_processes_in "$root"
rm -rf "$root" || die "cannot remove the last run's root $root"
cp -a "$cache/bootstrap" "$root" || die "cannot copy the bootstrap to $root"
mkdir -p "$root/logs" "$root/shared"
for f in hosts hostname resolv.conf; do cp -L "/etc/$f" "$root/etc/$f" 2>/dev/null; done
git -C "$project" archive --prefix=p/ HEAD | tar -x -C "$root" || die "cannot copy the committed tree"
echo "fresh_root: $(git -C "$project" log -1 --format='%h %s' | cut -c1-72) in $root"

status=0
for cmd in "${commands[@]}"; do
  log=$root/logs/$(echo "$cmd" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-60).log
  start=$SECONDS
  # A private mount namespace: the mounts end with the command, on any exit.
  unshare --mount --propagation private /bin/bash -c '
    root=$1 shared=$2 cmd=$3 apt_cache=$4
    mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev" \
      && mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" || exit 125
    if [ -n "$shared" ]; then mount --bind -o ro "$shared" "$root/shared" || exit 125; fi
    if [ -n "$apt_cache" ]; then mount --bind "$apt_cache" "$root/var/cache/apt/archives" || exit 125; fi
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "cd /p && $cmd"
  ' fresh_root "$root" "$shared" "$cmd" "$apt_cache" >"$log" 2>&1
  rc=$?
  echo "fresh_root: $cmd rc=$rc $((SECONDS - start)) s (log: $log)"
  if [ $rc -ne 0 ]; then
    status=1
    [ $rc -eq 125 ] && echo "fresh_root: the root's mounts failed"
    tail -40 "$log" | sed 's/^/  | /'
  fi
done
end_processes_in "$root"
exit $status
