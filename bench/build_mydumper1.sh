#!/usr/bin/env bash
# mydumper and myloader 1.0.1, built from their source for the restore race (bench/logical_restore_bench.py):
# Debian ships 0.10, and the race's reference is myloader 1.0 in its fastest setting.
#
#   bench/build_mydumper1.sh [SRC [DEST]]
#
# SRC: a checkout of the source (or LASTLINE_MYDUMPER1_SRC), e.g.
#   git clone --branch v1.0.1-3 https://github.com/mydumper/mydumper
# DEST: where the binaries go (or LASTLINE_MYDUMPER1_DIR; default bench/.mydumper1, not tracked). Nothing is
# built when DEST's myloader already reports 1.0.1; without SRC and without such binaries it says so and fails.
# Installs the Debian packages the source's CMakeLists needs when they are missing (as scripts/setup.sh does),
# then builds out of the source tree (DEST/build) with the project's CMake settings and CMAKE_BUILD_TYPE=Release
# (-O3), the build the upstream packages ship.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${1:-${LASTLINE_MYDUMPER1_SRC:-}}"
DEST="${2:-${LASTLINE_MYDUMPER1_DIR:-$ROOT/bench/.mydumper1}}"
WANT="1.0.1"

built() { [ -x "$DEST/myloader" ] && [ -x "$DEST/mydumper" ] && "$DEST/myloader" --version 2>&1 | grep -q "v$WANT"; }

if built; then
  echo "mydumper1: $("$DEST/myloader" --version 2>&1 | head -1) in $DEST (already built)"
  exit 0
fi
if [ -z "$SRC" ]; then
  echo "mydumper1: no myloader $WANT in $DEST and no source to build it from: set LASTLINE_MYDUMPER1_SRC to a checkout" \
       "(git clone --branch v1.0.1-3 https://github.com/mydumper/mydumper)" >&2
  exit 2
fi
SRC="$(cd "$SRC" && pwd)"
if ! grep -q "ver=\"$WANT\"" "$SRC/VERSION" 2>/dev/null; then
  echo "mydumper1: $SRC is not mydumper $WANT (its VERSION: $(tr '\n' ' ' < "$SRC/VERSION" 2>/dev/null || echo none))" >&2
  exit 2
fi

# what its CMakeLists finds: MariaDB's client library (mariadb_config), GLib, PCRE2, zlib, OpenSSL; a C and C++ compiler
PACKAGES=(cmake make gcc g++ pkg-config libmariadb-dev libglib2.0-dev libpcre2-dev zlib1g-dev libssl-dev libzstd-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "mydumper1: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$DEST/build"
echo "mydumper1: building $WANT from $SRC in $DEST/build"
# the source's CMakeLists writes src/config.h into the source tree: a checkout gets that one file
cmake -S "$SRC" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release >"$DEST/build.log" 2>&1 \
  && cmake --build "$DEST/build" --target mydumper myloader -j "$(nproc)" >>"$DEST/build.log" 2>&1 \
  || { tail -30 "$DEST/build.log" >&2; echo "mydumper1: the build failed; see $DEST/build.log" >&2; exit 1; }
cp "$DEST/build/mydumper" "$DEST/build/myloader" "$DEST/"
built || { echo "mydumper1: the built myloader does not report $WANT: $("$DEST/myloader" --version 2>&1 | head -1)" >&2; exit 1; }
echo "mydumper1: $("$DEST/myloader" --version 2>&1 | head -1) in $DEST"
