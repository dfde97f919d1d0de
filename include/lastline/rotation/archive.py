"""The binlog archive's envelopes re-wrapped: a sealed branch's `envelope.json` (pitr.catalog: its data key, bound to
the backup id `binlogs/<branch>`) gets it under the current key and recipients and is written again, signed; never if
it changed meanwhile (a re-run takes it). The archiver never writes that file after the branch's first sealed segment
(its chain, which it re-writes every round, holds no envelope), so a rotation and a running archive never undo each
other. A branch with no envelope.json is left alone (one written just before the chain that names it is re-wrapped
too). Airflow's record of the archive's head is made again if the head
changed."""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError
from lastline.pitr import catalog
from lastline.pitr.catalog import PREFIX
from lastline.rotation.manifests import Rotation, is_current
from lastline.rotation.plans import CHANGED, CURRENT, NOKEY, REWRAPPED, UNAUTHENTICATED, UNENCRYPTED, UNREADABLE, WOULD, Outcome
from lastline.storage import auth, control
from lastline.storage.envelope import Envelope, rewrap

log = logging.getLogger(__name__)
KIND = "binlogs"


def rotate_branch(rot: Rotation, bid: str) -> Outcome:
    """One branch's envelope re-wrapped (see the module), or why not."""
    name, key = f"{PREFIX}/{bid}", catalog.envelope_key(bid)
    try:
        catalog.read_branch(rot.storage, bid)  # its shape checked (and its MAC)
        if rot.storage.size_if_exists(key) is None:  # an envelope the archiver wrote before its chain says so counts
            return Outcome(name, KIND, UNENCRYPTED)
        found = control.read(rot.storage, key)
        if why := rot.refused(found.auth, rot.storage.location(key)):
            return Outcome(name, KIND, UNAUTHENTICATED, why)
        recorded = catalog.read_envelope(rot.storage, bid)  # its shape and branch checked
    except IntegrityError as exc:
        return Outcome(name, KIND, UNREADABLE, str(exc)[:400])
    try:
        env = Envelope.from_json(recorded, rot.storage.location(key))
        if is_current(env, rot.keys):
            return Outcome(name, KIND, CURRENT, was=env.needs())
        if rot.keys is None:
            raise ConfigError(f"{name} is wrapped under {env.needs()} and this deployment has no encryption key "
                              "connection to re-wrap it under")
        new = rewrap(env, rot.keys, name, found.auth.ok or auth.storage_trusted())
    except ConfigError as exc:
        return Outcome(name, KIND, NOKEY, str(exc)[:400])
    except IntegrityError as exc:
        return Outcome(name, KIND, UNREADABLE, str(exc)[:400])
    if rot.dry_run:
        return Outcome(name, KIND, WOULD, was=env.needs(), now=new.needs())
    if hashlib.sha256(control.read_bytes(rot.storage, key)).hexdigest() != found.sha256:
        return Outcome(name, KIND, CHANGED, "its envelope changed meanwhile: run the rotation again")
    written = catalog.write_envelope(rot.storage, bid, new.to_json(), sign=found.auth.ok)  # unsigned stays unsigned
    log.info("rotation: %s re-wrapped (%s -> %s), %d bytes written", rot.storage.location(key), env.needs(),
             new.needs(), written)
    return Outcome(name, KIND, REWRAPPED, was=env.needs(), now=new.needs(), bytes=written)


def rotate_archive(rot: Rotation, record_head: Callable[[dict[str, Any] | None], None] | None = None) -> list[Outcome]:
    """Every branch of the archive (none: no archive), and the head recorded again through `record_head` if it
    changed."""
    try:
        known = catalog.branches(rot.storage)
        before = catalog.head(rot.storage) if known else None
    except IntegrityError as exc:  # not authenticated, or not a list lastline wrote
        return [Outcome(f"{PREFIX}/branches.json", KIND, UNREADABLE, str(exc)[:400])]
    done = [rotate_branch(rot, str(b["id"])) for b in known]
    if any(o.status == REWRAPPED for o in done):
        after = catalog.head(rot.storage)
        if after != before and record_head is not None:
            record_head(after)
            log.info("rotation: the archive's head changed; recorded again in Airflow")
    return done
