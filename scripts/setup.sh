#!/usr/bin/env bash
# Install what is missing, and only that: Debian packages, the venv, a migrated project-local Airflow
# home. Never starts, stops or reconfigures the machine's own services.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PACKAGES=(mariadb-server mariadb-client mariadb-backup pigz zstd pkg-config libmariadb-dev libzstd-dev libssl-dev zlib1g-dev gcc procps openssh-server openssh-client pv
          strace  # a physical trust test watches which option files mariabackup --prepare opens
          chromium)  # chromium: the browser test drives Debian's build through Playwright (no browser download)
# benchmarks compare against these; tests and the demo do not need them
[ "${LASTLINE_BENCH:-0}" = 1 ] && PACKAGES+=(mydumper sysbench)  # the benches compare with mydumper, bench-impact loads with sysbench
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Keep package scripts from starting services (mariadb, ssh) while installing: this machine's
  # services are not ours to start or stop.
  added_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  trap '[ "$added_policy" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=".venv/.requirements.sha256"
want="$(cat requirements.txt constraints.txt pyproject.toml tools/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python packages (pinned in requirements.txt + constraints.txt)"
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
  .venv/bin/pip install -q -r requirements.txt 2>&1 | grep -v "is ignored" || true
  # the package itself, editable (no PYTHONPATH anywhere), and the dev tools beside it
  .venv/bin/pip install -q --no-deps -e . -e tools 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import airflow.sdk, MySQLdb, boto3, moto, paramiko, lastline.core, lastline_dev" # fail here if the install did not
  echo "$want" > "$stamp"
fi

# the native parts (C, include/lastline/logical/native/), each rebuilt when its source changes: the logical
# dump's worker, and the loader's LOAD DATA LOCAL handler (a library the loader loads into its process)
build() {  # build SOURCE OUTPUT "PKG-CONFIG MODULES" [gcc flags...]
  local src="$1" out="$2" modules="$3" stamp=".venv/.$(basename "$1").sha256" want
  shift 3
  want="$(cat "$src" <(echo "$modules $*") | sha256sum | cut -d' ' -f1)"
  if [ ! -e "$out" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: building $out"
    gcc -O2 -Wall -Werror "$@" -o "$out.tmp" "$src" $(pkg-config --cflags --libs $modules)
    mv "$out.tmp" "$out"
    echo "$want" > "$stamp"
  fi
}
build include/lastline/logical/native/tsvdump.c .venv/bin/lastline-tsvdump "libmariadb libzstd libcrypto"
# zlib: the handler inflates pigz's gzip chunks itself (no decompressor process, and no other handler)
build include/lastline/logical/native/infile.c .venv/lib/liblastline-infile.so "libmariadb libzstd zlib libcrypto" -shared -fPIC

if [ ! -f .airflow/airflow.db ]; then
  echo "setup: migrating the project-local Airflow home (.airflow, SQLite)"
  # through bin/airflow: tuned like the deployment (lastline.airflow.embedded), its default pool fits the cores
  bin/airflow db migrate >/dev/null
fi
echo "setup: ok"
