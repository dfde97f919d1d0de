#!/bin/sh
# A sandbox instance's service command: what `systemctl start|stop mariadb` is to a deployed server (the connection's
# service_start and service_stop). Plain shell, so that a restore's stop and start cost what the server's own do,
# not a Python start-up that imports Airflow (about 2 s each). Same rules as sandbox.Instance.start and stop.
#   service.sh start|stop INSTANCE_DIR [TIMEOUT]
set -u
verb=$1 dir=$2 timeout=${3:-}
pid=$(cat "$dir/mariadbd.pid" 2>/dev/null)
alive() {  # a zombie (dead, not yet reaped by the process that started it) does not count
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
running() { alive "$pid"; }
answers() {  # 0 even when the server refuses root: it answers
    mariadb-admin --no-defaults --socket="$dir/mariadbd.sock" --user=root --connect-timeout=2 ping >/dev/null 2>&1
}
ticks() { echo $(( ${timeout:-$1} * 10 )); }
case $verb in
start)
    n=$(ticks 60)
    while running && [ "$n" -gt 0 ]; do  # starting up, or stopped and not yet gone
        answers && exit 0
        sleep 0.1; n=$((n - 1))
    done
    setsid mariadbd --defaults-file="$dir/my.cnf" >>"$dir/mariadbd.out" 2>&1 </dev/null &
    spawned=$! n=$(ticks 60)
    while [ "$n" -gt 0 ] && alive "$spawned"; do
        [ -S "$dir/mariadbd.sock" ] && answers && exit 0
        sleep 0.1; n=$((n - 1))
    done
    echo "sandbox $dir did not start (within ${timeout:-60} s); error log ends:" >&2
    tail -c 2000 "$dir/error.log" >&2
    exit 1 ;;
stop)
    running || exit 0
    kill -TERM "$pid"
    n=$(ticks 120)
    while [ "$n" -gt 0 ]; do
        running || exit 0
        sleep 0.1; n=$((n - 1))
    done
    kill -KILL "$pid" ;;
*)
    echo "usage: service.sh start|stop INSTANCE_DIR [TIMEOUT]" >&2; exit 2 ;;
esac
