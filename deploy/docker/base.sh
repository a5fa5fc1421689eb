#!/usr/bin/env bash
# Builds the local Debian 12 base image the Dockerfiles start from when no registry is
# reachable: debootstrap (minbase) from the Debian mirror this machine's apt already uses,
# then `podman import`. The mirror is read from the apt sources at run time, never written
# into the repository, so the images install from the same archive as the host.
#
#   deploy/docker/base.sh            build tierserve-base:bookworm unless it exists
#   deploy/docker/base.sh --mirror   print the mirror and the security mirror, build nothing
#
# The rootfs tarball is cached in $TIERSERVE_PODMAN_CACHE (default ~/.cache/tierserve/podman),
# outside the clone, so a wiped podman store re-imports it without a new debootstrap.
set -euo pipefail

BASE_IMAGE=${TIERSERVE_BASE_IMAGE:-localhost/tierserve-base:bookworm}
SUITE=bookworm
CACHE=${TIERSERVE_PODMAN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/tierserve/podman}
PODMAN=(podman ${TIERSERVE_PODMAN_ARGS:-})

log() { printf '[base] %s\n' "$*" >&2; }

# The first URI of an apt source that carries $1 (a suite name, matched exactly), from the
# one-line sources.list format and the deb822 *.sources format alike.
mirror_for() {
  local want=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v s="$want" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
      if ($(i+1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    # one stanza per paragraph: print its first URI when its Suites has the wanted suite
    awk -v s="$want" 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; hit = 0; deb = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^[ \t]*#/) continue
          if ($i ~ /^Types:/ && $i ~ /(^|[ \t])deb([ \t]|$)/) deb = 1
          if ($i ~ /^URIs:/) { split($i, u, /[ \t]+/); uri = u[2] }
          if ($i ~ /^Suites:/) { n = split($i, t, /[ \t]+/); for (k = 2; k <= n; k++) if (t[k] == s) hit = 1 }
        }
        if (deb && hit && uri != "") { print uri; exit } }' "$f"
  done
}

MIRROR=$(mirror_for "$SUITE" | head -n1)
UPDATES=$(mirror_for "$SUITE-updates" | head -n1)
SECURITY=$(mirror_for "$SUITE-security" | head -n1)
if [ -z "$MIRROR" ]; then
  log "no apt source for Debian $SUITE in /etc/apt/sources.list{,.d/}: cannot pick a mirror"
  exit 1
fi

if [ "${1:-}" = "--mirror" ]; then
  printf 'mirror=%s\nsecurity=%s\n' "$MIRROR" "${SECURITY:-}"
  exit 0
fi

# The cache is keyed by this script's content: change the recipe and the base is rebuilt.
RECIPE=$(sha256sum "$0" | cut -c1-12)
if [ "$("${PODMAN[@]}" image inspect -f '{{index .Config.Labels "tierserve.base.recipe"}}' "$BASE_IMAGE" 2>/dev/null)" = "$RECIPE" ]; then
  log "$BASE_IMAGE exists (cached, recipe $RECIPE)"
  exit 0
fi

mkdir -p "$CACHE"
tarball=$CACHE/base-$SUITE-$RECIPE.tar
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is not installed"; exit 1; }
  [ "$(id -u)" -eq 0 ] || { log "debootstrap needs root"; exit 1; }
  root=$CACHE/rootfs-$SUITE
  rm -rf "$root"
  log "debootstrap --variant=minbase $SUITE from $MIRROR (a few minutes)"
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -30 "$CACHE/debootstrap.log" >&2; exit 1; }
  # The images install their packages from the archives the host uses: the release and,
  # where the host has them, its updates and security suites.
  {
    echo "deb $MIRROR $SUITE main"
    if [ -n "$UPDATES" ]; then echo "deb $UPDATES $SUITE-updates main"; fi
    if [ -n "$SECURITY" ]; then echo "deb $SECURITY $SUITE-security main"; fi
  } >"$root/etc/apt/sources.list"
  # Keep images small: no docs, man pages or locales from later apt-get installs, and no
  # recommends.
  cat >"$root/etc/dpkg/dpkg.cfg.d/01-tierserve-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$root/etc/apt/apt.conf.d/01-tierserve-norecommends"
  # As Debian's own container images do: no downloaded .debs and no package caches (80 MB
  # after an apt-get update) left in any layer.
  cat >"$root/etc/apt/apt.conf.d/02-tierserve-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
  # what debootstrap itself installed, trimmed the same way (as Debian's -slim images are)
  find "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" -mindepth 1 -delete
  find "$root/usr/share/locale" -mindepth 1 ! -name locale.alias -delete
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
    "$root"/var/log/* "$root"/var/cache/debconf/*-old
  tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  rm -f "$CACHE"/base-$SUITE-*.tar
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
fi
log "podman import $tarball as $BASE_IMAGE"
"${PODMAN[@]}" import -q --change 'CMD ["/bin/bash"]' \
  --change "LABEL tierserve.base.recipe=$RECIPE" "$tarball" "$BASE_IMAGE" >/dev/null
