"""One backup's manifest re-wrapped: read bounded and authenticated (a manifest that does not authenticate is reported,
never signed again: that would launder a forged one), its envelope re-wrapped under the current key and recipients
(envelope.rewrap), and written back signed, byte for byte as it was but for the envelope's line and the MAC. The
backup's data objects are never touched: the data key does not change."""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lastline.core.errors import ConfigError, IntegrityError
from lastline.manifest import MANIFEST, read_manifest
from lastline.rotation.plans import (
    CHANGED,
    CURRENT,
    GONE,
    NOKEY,
    REWRAPPED,
    UNAUTHENTICATED,
    UNENCRYPTED,
    UNREADABLE,
    WOULD,
    Outcome,
)
from lastline.storage import Storage, auth, control
from lastline.storage.encryption_keys import EncryptionKeys
from lastline.storage.envelope import Envelope, rewrap

log = logging.getLogger(__name__)
# (kind, backup id, the manifest's new sha256) -> whether Airflow's pin of the newest backup of that kind was updated
Pin = Callable[[str, str, str], bool]


def is_current(env: Envelope, keys: EncryptionKeys | None) -> bool:
    """Whether `env` is wrapped under exactly the current KEK and recipients (a re-run skips it)."""
    if keys is None:
        return False
    wanted = {("kek", keys.current.key_id)} if keys.current else set()
    wanted |= {("x25519", r.key_id) for r in keys.recipients}
    return len(env.wrappings) == len(wanted) and {(w.kind, w.key_id) for w in env.wrappings} == wanted


def wraps_to(keys: EncryptionKeys | None) -> str:
    """What a rotation wraps under, for messages: "k2 (kek), ops (x25519)"; "" when the keys hold nothing to write with."""
    if keys is None:
        return ""
    kek = [f"{keys.current.key_id} (kek)"] if keys.current else []
    return ", ".join(kek + [f"{r.key_id} (x25519)" for r in keys.recipients])


def spliced(raw: bytes, recorded: dict[str, Any], new: dict[str, Any], where: str) -> bytes:
    """Control file `raw` (its MAC removed: auth.unsigned) with its one line `"encryption": <recorded>` (as
    manifest.json_lines writes it) holding `new` instead; refused (IntegrityError) unless the result parses to the
    same object with that one member changed."""
    body = auth.unsigned(raw)
    old_line = b'\n "encryption": ' + json.dumps(recorded, sort_keys=True).encode()
    at = body.find(old_line)
    end = at + len(old_line)
    if at < 0 or body.find(old_line, end) >= 0 or body[end:end + 1] not in (b",", b"\n"):
        raise IntegrityError(f"{where}: its envelope is not on a line of its own, as lastline writes it")
    out = body[:at] + b'\n "encryption": ' + json.dumps(new, sort_keys=True).encode() + body[end:]
    before = control.parse(body, where)
    if not isinstance(before, dict) or control.parse(out, where) != {**before, "encryption": new}:
        raise IntegrityError(f"{where}: re-writing its envelope would change more than the envelope")
    return out


@dataclass(frozen=True)
class Rotation:
    """What a rotation of one destination works with: its storage, the deployment's encryption keys, whether it has a
    storage key, whether this is a dry run, and `pin` (None: no Airflow to tell)."""

    storage: Storage
    keys: EncryptionKeys | None
    storage_key: bool
    dry_run: bool = False
    pin: Pin | None = None

    def refused(self, found: auth.Authenticity, where: str) -> str:
        """Why a control file may not be re-written by this deployment ("" when it may): with a storage key, it must
        authenticate (or be unsigned on storage declared trusted: storage.auth.require); without one, a signed file
        is refused too (written back unsigned, it would lose its MAC)."""
        if self.storage_key:
            try:
                auth.require(found, where, "a key rotation")
            except IntegrityError:
                return f"{found.describe()}: never signed again (that would launder a forged manifest)"
            return ""
        if found.state == "nokey":
            return f"{found.describe()}: re-written without a storage key, it would lose its MAC"
        return ""

    def rotate(self, backup_id: str) -> Outcome:
        """Backup `backup_id`'s manifest re-wrapped (see the module), or why not."""
        key = f"{backup_id}/{MANIFEST}"
        where = self.storage.location(key)
        if self.storage.size_if_exists(key) is None:
            return Outcome(backup_id, None, GONE, "removed since the listing (pruned?)")
        try:
            raw = control.read_bytes(self.storage, key)
        except IntegrityError as exc:  # too big, a link, not a file
            return Outcome(backup_id, None, UNREADABLE, str(exc)[:300])
        sha = hashlib.sha256(raw).hexdigest()
        try:
            kind = str(control.parse(raw, where).get("kind", "physical"))
            manifest = read_manifest(self.storage, backup_id, kind, sha256=sha, require=False)
        except (IntegrityError, AttributeError) as exc:  # AttributeError: not an object
            return Outcome(backup_id, None, UNREADABLE, str(exc)[:300])
        if manifest.encryption is None:
            return Outcome(backup_id, kind, UNENCRYPTED)
        if why := self.refused(manifest.authenticity, where):
            return Outcome(backup_id, kind, UNAUTHENTICATED, why)
        try:
            env = Envelope.from_json(manifest.encryption, where)
            if is_current(env, self.keys):
                pinned = not self.dry_run and bool(self.pin and self.pin(kind, backup_id, sha))  # a killed run's
                return Outcome(backup_id, kind, CURRENT, was=env.needs(), pinned=pinned)
            if self.keys is None:
                raise ConfigError(f"backup {backup_id!r} is wrapped under {env.needs()} and this deployment has no "
                                  "encryption key connection to re-wrap it under")
            new = rewrap(env, self.keys, backup_id, manifest.authenticity.ok or auth.storage_trusted())
            body = spliced(raw, manifest.encryption, new.to_json(), where)
            # signed again only what authenticated: one taken unsigned on trusted storage stays unsigned
            out = auth.sign(key, body) if manifest.authenticity.ok else body
        except ConfigError as exc:
            return Outcome(backup_id, kind, NOKEY, str(exc)[:400], was=env.needs())
        except IntegrityError as exc:
            return Outcome(backup_id, kind, UNREADABLE, str(exc)[:400])
        if self.dry_run:
            return Outcome(backup_id, kind, WOULD, was=env.needs(), now=new.needs())
        if self.storage.size_if_exists(key) is None or hashlib.sha256(control.read_bytes(self.storage, key)).hexdigest() != sha:
            return Outcome(backup_id, kind, CHANGED, "its manifest changed or went while it was re-wrapped: run again")
        self.storage.write_bytes(key, out)
        pinned = bool(self.pin and self.pin(kind, backup_id, hashlib.sha256(out).hexdigest()))
        log.info("rotation: %s re-wrapped (%s -> %s), %d bytes written%s", where, env.needs(), new.needs(), len(out),
                 "; Airflow's pin of the newest backup updated" if pinned else "")
        return Outcome(backup_id, kind, REWRAPPED, was=env.needs(), now=new.needs(), bytes=len(out), pinned=pinned)
