"""`make ui`: Airflow's UI on the demo's servers, so a newcomer can trigger a restore from its form.

Needs `make demo` first (its sandboxes, its backups, its connections in the project's Airflow database).
Runs `bin/airflow standalone` in the foreground on 127.0.0.1 (LASTLINE_UI_PORT, default 8080) with every
visitor an admin (a local sandbox only: never expose it), the backups' folder as the default destination
(the restore forms offer its `latest`; the Backups page lists every backup) and the nightly schedules off. Ctrl-C stops it.
Airflow is tuned as bin/airflow tunes it for every command (lastline.airflow.embedded: the deployment's settings, and
task processes for this machine's cores); a setting in the caller's environment wins.

Its ports are 127.0.0.1's: the UI's and API's (LASTLINE_UI_PORT, 8080), the worker's log server's
(AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT, 8793) and the triggerer's (AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT, 8794).
Each one taken (another Airflow, another user's process) gives way to the next free port above it, and the URL printed
is the one served.
"""
from __future__ import annotations

import os
import socket
import sys

from lastline_dev.demo import DEMO, ROOT, save_connections, say, servers, start_servers

# (environment variable, default): the UI and API, the worker's log server, the triggerer's log server
PORTS = (("LASTLINE_UI_PORT", 8080), ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", 8793),
         ("AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT", 8794))
SEARCH = 100  # ports tried above each one asked for


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now: not while anything listens on it, on 127.0.0.1, on
    every address or on a dual-stack `::`; yes when a server just stopped left it in TIME_WAIT (servers bind with
    SO_REUSEADDR, as this probe does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def next_free(asked: int, taken: set[int] | frozenset[int] = frozenset()) -> int:
    """`asked`, or the first port above it free on 127.0.0.1 and not in `taken` (the ones already chosen)."""
    for port in range(asked, min(asked + SEARCH, 65536)):
        if port not in taken and port_free(port):
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 from {asked} to {min(asked + SEARCH, 65536) - 1}: stop what holds "
                       "them, or set another port")


def choose_ports(env: dict[str, str]) -> dict[str, int]:
    """Each of PORTS as it will be served: the one `env` asks for (else its default), or the next free one above it."""
    chosen: dict[str, int] = {}
    for name, default in PORTS:
        asked = env.get(name) or str(default)
        if not asked.isdigit() or not 0 < int(asked) < 65536:
            raise RuntimeError(f"{name}={asked!r} is not a port (1-65535)")
        chosen[name] = next_free(int(asked), set(chosen.values()))
    return chosen


def main() -> int:
    if not (DEMO / "backups").exists() or not servers()["source"].exists():
        say("no demo servers yet: run `make demo` first (it creates them, backs up and restores once)")
        return 1
    save_connections(start_servers())
    try:  # chosen just before Airflow starts: the window for another process to take one is a moment
        ports = choose_ports(dict(os.environ))
    except RuntimeError as exc:
        say(str(exc))
        return 1
    for name, default in PORTS:
        asked = int(os.environ.get(name) or default)
        if ports[name] != asked:
            say(f"port {asked} ({name}) is taken on 127.0.0.1: using {ports[name]}")
    port = str(ports["LASTLINE_UI_PORT"])
    env = {**os.environ,
           "LASTLINE_DESTINATION": f"file://{DEMO / 'backups'}",
           "LASTLINE_STORAGE_KEY_CONN_ID": "lastline_storage_key",  # the demo's key signs and checks its backups
           "LASTLINE_PHYSICAL_BACKUP_SCHEDULE": "none", "LASTLINE_LOGICAL_BACKUP_SCHEDULE": "none",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",  # loopback only, sandboxes only
           "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",  # the connection form's Test connection (MariaDbHook.test_connection)
           "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": port,  # loopback whatever the environment says
           **{name: str(number) for name, number in ports.items() if name.startswith("AIRFLOW__")},
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/"}
    say(f"Airflow's UI on the demo servers: http://127.0.0.1:{port} (up in about 30 s; Ctrl-C stops it)")
    say("  Dags > logical_restore > Trigger: the form offers the demo's latest backup; the target is the demo's")
    say("  (a restore that replaces data waits for your approval under 'Required actions'); each run has a Report tab")
    say("  every DAG succeeds with its form's defaults: staging_refresh writes into lastline_staging (masked by the "
        "Variable lastline_masking_rules), restore_drill into lastline_drill, replica_rebuild builds lastline_replica "
        "and replica_detach cuts it off; binlog_archive before point_in_time_restore")
    say("  Backups (in the navigation): every backup with its verification and point-in-time window, and a link that "
        "opens its restore prefilled; a lastline connection's Test connection names what its account lacks")
    os.execve(str(ROOT / "bin/airflow"), [str(ROOT / "bin/airflow"), "standalone"], env)


if __name__ == "__main__":
    sys.exit(main())
