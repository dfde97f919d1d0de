"""`make ui`: Airflow's UI on the demo's servers, so a newcomer can trigger a restore from its form.

Needs `make demo` first (its sandboxes, its backups, its connections in the project's Airflow database).
Runs `bin/airflow standalone` in the foreground on 127.0.0.1 (LASTLINE_UI_PORT, default 8080) with every
visitor an admin (a local sandbox only: never expose it), the backups' folder as the default destination
(the restore forms offer its `latest`; the Backups page lists every backup) and the nightly schedules off. Ctrl-C stops it.
Airflow is tuned as bin/airflow tunes it for every command (lastline.airflow.embedded: the deployment's settings, and
task processes for this machine's cores); a setting in the caller's environment wins.
"""
from __future__ import annotations

import os
import sys

from lastline_dev.demo import DEMO, ROOT, save_connections, say, servers, start_servers


def main() -> int:
    if not (DEMO / "backups").exists() or not servers()["source"].exists():
        say("no demo servers yet: run `make demo` first (it creates them, backs up and restores once)")
        return 1
    save_connections(start_servers())
    port = os.environ.get("LASTLINE_UI_PORT", "8080")
    env = {**os.environ,
           "LASTLINE_DESTINATION": f"file://{DEMO / 'backups'}",
           "LASTLINE_STORAGE_KEY_CONN_ID": "lastline_storage_key",  # the demo's key signs and checks its backups
           "LASTLINE_PHYSICAL_BACKUP_SCHEDULE": "none", "LASTLINE_LOGICAL_BACKUP_SCHEDULE": "none",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",  # loopback only, sandboxes only
           "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",  # the connection form's Test connection (MariaDbHook.test_connection)
           "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": port,  # loopback whatever the environment says
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
