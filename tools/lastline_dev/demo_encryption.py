"""`make demo`'s encrypted backup, key rotation and verify, in a folder of their own (`.demo/backups-encrypted`):

1. a logical backup of the source, uncompressed (so that a row in the clear would show), sealed under the demo's first
   encryption key (`demo-enc-1`): no stored file but the manifest holds a row of the source in the clear (a
   customer's e-mail address is looked for, and not found);
2. the key rotated as an operator does it: the connection `lastline_encryption` gets a new key (`demo-enc-2`) and
   keeps the first in its extras `keys`; `key_rotation` re-wraps the backup's data key under it (the manifest alone
   is written: every data file's sha256 is the same after it);
3. `backup_verify` of that folder: every file's size and sha256 against the signed manifest, every sealed chunk opened;
4. `logical_restore` of it into the target, compared table by table with the source.

The rest of the demo's deployment (`.demo/backups`, `make ui`) stays unencrypted: the encryption key connection is
named (LASTLINE_ENCRYPTION_KEY_CONN_ID) for these runs only. The keys are the demo's own, kept 0600 in `.demo/`.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from lastline.manifest import complete_backups
from lastline.storage import open_storage
from lastline.storage.encryption_keys import KEY_CONN_ENV
from lastline_dev.compare import compare
from lastline_dev.dataset import DATABASE
from lastline_dev.sandbox import Instance

ENCRYPTION_CONN = "lastline_encryption"
FIRST, SECOND = "demo-enc-1", "demo-enc-2"


def key_connection(key: Callable[[str], str], rotated: bool = True) -> dict:
    """The demo's encryption key connection: before the rotation the first key alone; after it (what the demo
    leaves) the second, the first kept in extras `keys` (backups not yet re-wrapped still open)."""
    about = "the demo's encryption key (a generic connection: login the current key's id, password the key)"
    if not rotated:
        return {"conn_type": "generic", "login": FIRST, "password": key("encryption-1"), "description": about}
    return {"conn_type": "generic", "login": SECOND, "password": key("encryption-2"),
            "extra": {"keys": {FIRST: key("encryption-1")}}, "description": about + "; its extras `keys` the older one"}


def _envelope(folder: Path, backup_id: str) -> dict:
    """The backup's envelope as its manifest records it, for the demo's lines (the DAGs read the manifest checked)."""
    return json.loads((folder / backup_id / "manifest.json").read_text()).get("encryption") or {}


def _files(folder: Path, secret: bytes) -> tuple[dict[str, str], list[str]]:
    """Every file under `folder` but the manifests, read once: each one's sha256, and those that hold `secret`."""
    digests, found = {}, []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != "manifest.json":
            data = p.read_bytes()
            digests[str(p.relative_to(folder))] = hashlib.sha256(data).hexdigest()
            if secret in data:
                found.append(str(p.relative_to(folder)))
    return digests, found


def showcase(demo: Path, source: Instance, target: Instance, env: dict, key: Callable[[str], str],
             put: Callable[[dict], object], run_dag: Callable[[str, dict, dict], float],
             say: Callable[[str], None]) -> bool:
    """Steps 1 to 4 above (`put` stores connections in the Airflow database, `run_dag` runs a DAG as the demo does);
    True when the restore equals the source."""
    folder = demo / "backups-encrypted"
    shutil.rmtree(folder, ignore_errors=True)  # each demo shows it anew
    dest = f"file://{folder}"
    env = {**env, KEY_CONN_ENV: ENCRYPTION_CONN, "LASTLINE_BACKUP_ROOTS": dest}
    put({ENCRYPTION_CONN: key_connection(key, rotated=False)})
    run_dag("logical_backup", {"source_conn_id": "lastline_source", "destination": dest, "compression": "none"}, env)
    storage = open_storage(dest)
    backup_id = complete_backups(storage, "logical")[-1]
    envelope = _envelope(folder, backup_id)
    secret = source.server().query(f"SELECT email FROM {DATABASE}.customer ORDER BY customer_id LIMIT 1")[0][0]
    before, found = _files(folder, secret.encode())
    wrapped = [w.get("key_id") for w in envelope.get("wrappings", [])]
    sealed = wrapped == [FIRST] and bool(envelope.get("cipher"))
    say(f"encrypted backup {backup_id} in {folder.relative_to(demo.parent)}: {len(before)} files sealed "
        f"({envelope.get('cipher')}), data key wrapped under {', '.join(map(str, wrapped))}; the "
        f"customer e-mail {secret!r} is in " + (f"{found} IN THE CLEAR" if found else "none of them"))
    put({ENCRYPTION_CONN: key_connection(key)})
    say(f"rotating: {ENCRYPTION_CONN} now holds {SECOND}, {FIRST} kept in its extras `keys`")
    run_dag("key_rotation", {"destination": dest}, env)
    wrapped = [w.get("key_id") for w in _envelope(folder, backup_id).get("wrappings", [])]
    same = _files(folder, secret.encode())[0] == before
    say(f"after key_rotation the data key is wrapped under {', '.join(map(str, wrapped))}; the data files are "
        + ("the same bytes (only the manifest was written)" if same else "CHANGED"))
    run_dag("backup_verify", {"destination": dest}, env)
    verdict = [line.split("] ", 1)[-1].split(" [lastline")[0] for line in (demo / "logs" / "backup_verify.log").read_text()
               .splitlines() if "[lastline.verify.backups]" in line and ": ok, " in line
               and "opened: every sealed chunk authenticated" in line]
    say("backup_verify: " + ("; ".join(verdict) if verdict else "NO backup found ok"))
    run_dag("logical_restore", {"target_conn_id": "lastline_target", "backup": f"{dest}/latest", "force": True,
                                "redo_log_bytes": 256 << 20}, env)
    diff = compare(source.server(), target.server())
    say("after the encrypted backup's restore, CHECKSUM TABLE: "
        + ("all equal on source and target" if not diff else f"DIFFER: {diff}"))
    return sealed and not found and wrapped == [SECOND] and same and bool(verdict) and not diff
