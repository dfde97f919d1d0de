#!/bin/sh
# A sandbox instance's service command: what `systemctl start|stop mariadb` is to a deployed server (the connection's
# service_start and service_stop). Plain shell, so that a restore's stop and start cost what the server's own do,
# not a Python start-up that imports Airflow (about 2 s each). The rules of sandbox.Instance.start and stop, and:
# the server it started is known by its own pid file (service.pid, written at once; mariadbd writes mariadbd.pid
# only after its recovery), a pid is believed only if it is a mariadbd's, and stop returns once the process is gone.
#   service.sh start|stop INSTANCE_DIR [TIMEOUT_SECONDS]   (default 60 to start, 100 to stop: lastline waits 120)
set -u
verb=$1 timeout=${3:-}
dir=$(cd "$2" 2>/dev/null && pwd -P) || { echo "service.sh: no instance folder $2" >&2; exit 2; }
case $timeout in *[!0-9]*) echo "service.sh: the timeout is whole seconds, not $timeout" >&2; exit 2 ;; esac
command -v mariadb-admin >/dev/null && command -v mariadbd >/dev/null || {
    echo "service.sh: mariadbd and mariadb-admin must be on the PATH ($PATH)" >&2; exit 127; }
cnf=$(readlink -f "$dir/my.cnf")
ours() {  # whether pid $1 is a running (not zombie) mariadbd of this instance (its --defaults-file)
    case $1 in ''|0|*[!0-9]*) return 1 ;; esac
    [ "$(cat "/proc/$1/comm" 2>/dev/null)" = mariadbd ] || return 1
    grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null && return 1
    f=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 's/^--defaults-file=//p' | head -n 1)
    [ -n "$f" ] && [ "$(cd "/proc/$1/cwd" 2>/dev/null && readlink -f "$f")" = "$cnf" ]  # relative to its own cwd
}
mariadbd_pid() {  # the pid in file $1 if it is ours
    p=$(cat "$1" 2>/dev/null) && ours "$p" && echo "$p"
}
running() { mariadbd_pid "$dir/service.pid" || mariadbd_pid "$dir/mariadbd.pid"; }
answers() {  # exit 0 for any answer of the server, Access denied included
    mariadb-admin --no-defaults --socket="$dir/mariadbd.sock" --user=root --connect-timeout=2 ping >/dev/null 2>&1
}
[ -n "$timeout" ] || { [ "$verb" = stop ] && timeout=100 || timeout=60; }
deadline=$(( $(date +%s) + timeout ))
before() { [ "$(date +%s)" -lt "$deadline" ]; }
case $verb in
start)
    while running >/dev/null; do  # starting up, or stopping and not yet gone: never a second server beside it
        answers && exit 0
        before || { echo "sandbox $dir: its server neither answers nor stops (pid $(running)); not started again" >&2; exit 1; }
        sleep 0.1
    done
    deadline=$(( $(date +%s) + timeout ))
    setsid mariadbd --defaults-file="$dir/my.cnf" >>"$dir/mariadbd.out" 2>&1 </dev/null &
    spawned=$!
    echo "$spawned" > "$dir/service.pid"
    # until it answers, or it is gone (not `ours`: until setsid has exec'd, the child is not yet a mariadbd)
    while before && kill -0 "$spawned" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$spawned/status" 2>/dev/null; do
        [ -S "$dir/mariadbd.sock" ] && answers && exit 0
        sleep 0.1
    done
    echo "sandbox $dir did not start; its output and error log end:" >&2
    tail -c 1000 "$dir/mariadbd.out" >&2
    tail -c 2000 "$dir/error.log" >&2
    exit 1 ;;
stop)
    pid=$(running) || exit 0
    kill -TERM "$pid"
    while before; do
        ours "$pid" || exit 0
        sleep 0.1
    done
    kill -KILL "$pid"
    n=100
    while ours "$pid" && [ "$n" -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
    ! ours "$pid" ;;
*)
    echo "usage: service.sh start|stop INSTANCE_DIR [TIMEOUT_SECONDS]" >&2; exit 2 ;;
esac
