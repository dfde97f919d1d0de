"""Authenticated storage: an HMAC-SHA256 over each control file lastline writes, with a key only the deployment holds.

Someone who can write backup storage can rewrite a file and its sha256 alike; they cannot make a MAC without the
key. The key is an Airflow connection of type generic named by the deployment setting LASTLINE_STORAGE_KEY_CONN_ID
(never by a run's conf, never kept beside the backups): its login is the id of the key lastline signs with, its
password that key (32 characters or more); its extras may hold older keys, still accepted when reading, as
`{"keys": {"<id>": "<secret>", ...}}`: to rotate, put the current key there under its id and a new login and
password in the connection.

A signed file is the JSON object lastline wrote with one more member, last, on a line of its own:
`"lastline_mac": "hmac-sha256:<key id>:<hex>"`. The MAC covers the file's bytes before that member and the
file's key in the destination (`<backup_id>/manifest.json`, `binlogs/<branch>/chain.json`), so a file moved to
another place fails too. Data files are covered through the sha256 a signed manifest or chain gives them.

LASTLINE_STORAGE_TRUSTED=true declares that only lastline can write the storage: files without a MAC (older
backups, a deployment without a key) are then used by the kinds that otherwise refuse them.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass, field

from lastline.core.errors import ConfigError, IntegrityError

log = logging.getLogger(__name__)

KEY_CONN_ENV = "LASTLINE_STORAGE_KEY_CONN_ID"
TRUSTED_ENV = "LASTLINE_STORAGE_TRUSTED"
FIELD = "lastline_mac"
MIN_KEY_CHARS = 32
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_TAIL = re.compile(rb'(,?)\n "lastline_mac": "hmac-sha256:([A-Za-z0-9._-]{1,64}):([0-9a-f]{64})"\n\}\n\Z')


@dataclass(frozen=True)
class Keys:
    """The deployment's storage keys: the one it signs with, and every one it accepts (by id)."""

    sign_id: str
    secrets: dict[str, bytes] = field(repr=False)


def key_entry(where: str, key_id: object, secret: object) -> tuple[str, bytes]:
    """(id, secret) of one key of a key connection, checked: an id of 1 to 64 letters, digits, '.', '_' or '-', a
    secret of 32 characters or more (storage.encryption_keys reads its keys by the same rules)."""
    if not isinstance(key_id, str) or not _KEY_ID.match(key_id):
        # never quoted: an id and a secret swapped in the extras would print the secret
        raise ConfigError(f"{where}: a key id is not 1 to 64 letters, digits, '.', '_' or '-' (were a key's id and "
                          "secret swapped?); its value is not shown.")
    if not isinstance(secret, str) or len(secret) < MIN_KEY_CHARS:
        shown = repr(key_id) if len(key_id) < MIN_KEY_CHARS else "(its id not shown: as long as a key)"
        raise ConfigError(f"{where}: the secret of key {shown} must be a string of {MIN_KEY_CHARS} characters or more "
                          "(e.g. `openssl rand -hex 32`; were a key's id and secret swapped?).")
    return key_id, secret.encode()


def deployment_keys() -> Keys | None:
    """The keys of the connection LASTLINE_STORAGE_KEY_CONN_ID names (None when the deployment sets none), or a
    ConfigError saying what is wrong with it."""
    conn_id = os.environ.get(KEY_CONN_ENV, "").strip()
    if not conn_id:
        return None
    from lastline.connections import key_ring

    conn_type, login, password, extra = key_ring(conn_id)  # its secrets masked in every log
    where = f"storage key connection {conn_id!r} ({KEY_CONN_ENV})"
    if conn_type != "generic":
        raise ConfigError(f"{where} is of type {conn_type!r}: keep the storage key in a generic connection of its own.")
    if not login or not password:
        raise ConfigError(f"{where} needs a login (the key's id) and a password (the key), e.g. AIRFLOW_CONN_"
                          f"{conn_id.upper()}='{{\"conn_type\": \"generic\", \"login\": \"k1\", \"password\": \"<64 hex>\"}}'.")
    sign_id, secret = key_entry(where, login, password)
    older = extra.get("keys") or {}
    if not isinstance(older, dict):
        raise ConfigError(f"{where}: extras `keys` must be an object {{\"<id>\": \"<secret>\"}}.")
    secrets = dict(key_entry(where, k, v) for k, v in older.items())
    secrets[sign_id] = secret
    return Keys(sign_id, secrets)


def storage_trusted() -> bool:
    """Whether the deployment declares that only lastline writes its backup storage (LASTLINE_STORAGE_TRUSTED)."""
    return os.environ.get(TRUSTED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _message(key: str, region: bytes) -> bytes:
    return b"lastline-control/1\x00" + key.encode() + b"\x00" + region


def _mac(secret: bytes, key: str, region: bytes) -> str:
    return hmac.new(secret, _message(key, region), hashlib.sha256).hexdigest()


def sign(key: str, body: bytes, keys: Keys | None = None) -> bytes:
    """`body` (a JSON object's text) as lastline writes control file `key`: with its MAC when the deployment has a
    key (`keys`, else its own), unchanged without one."""
    keys = keys or deployment_keys()
    if keys is None:
        return body
    text = body.rstrip()
    if not (text.startswith(b"{") and text.endswith(b"}")):
        raise ValueError(f"{key}: only a JSON object is signed")
    region = text[:-1].rstrip()
    sep = b"" if region.endswith(b"{") else b","
    tag = f"hmac-sha256:{keys.sign_id}:{_mac(keys.secrets[keys.sign_id], key, region)}"
    return region + sep + f'\n "{FIELD}": "{tag}"\n}}\n'.encode()


def unsigned(raw: bytes) -> bytes:
    """A control file as it was before `sign` (its MAC member removed, every other byte kept): what a writer that
    changes one member of a file it authenticated signs again (a key rotation)."""
    found = _TAIL.search(raw)
    return raw if found is None else raw[:found.start()] + b"\n}\n"


@dataclass(frozen=True)
class Authenticity:
    """Whether a control file was authenticated: `key_id` of the key that did, else `state` (unsigned, nokey,
    unknown_key, mismatch) and `problem`, the reason in words."""

    key_id: str | None = None
    state: str = "ok"
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.key_id is not None

    def describe(self) -> str:
        """One phrase for logs and reports."""
        return f"authenticated (storage key {self.key_id})" if self.ok else f"not authenticated: {self.problem}"


def check(key: str, raw: bytes, data: object, keys: Keys | None = None) -> Authenticity:
    """Whether `raw` (control file `key`, parsed as `data`) carries a valid MAC of one of the deployment's keys."""
    keys = keys or deployment_keys()
    found = _TAIL.search(raw)
    if found is None or not isinstance(data, dict) or FIELD not in data:
        moved = isinstance(data, dict) and FIELD in data
        return Authenticity(None, "mismatch" if moved else "unsigned",
                            "its MAC is not where lastline writes it (the file was rewritten)" if moved
                            else "it carries no MAC (written without a storage key)")
    key_id = found[2].decode()
    if keys is None:
        return Authenticity(None, "nokey", f"it is signed with key {key_id!r}, but this deployment has no storage key "
                                           f"({KEY_CONN_ENV}) to check it")
    secret = keys.secrets.get(key_id)
    if secret is None:
        return Authenticity(None, "unknown_key", f"it is signed with key {key_id!r}, which the storage key connection "
                                                 "does not hold")
    if not hmac.compare_digest(_mac(secret, key, raw[:found.start()]), found[3].decode()):
        return Authenticity(None, "mismatch", "its MAC does not match: it was changed (or moved) after lastline signed it")
    return Authenticity(key_id)


def accepted(found: Authenticity) -> bool:
    """Whether a control file may be used where authenticity is required: authenticated, or merely unsigned (or
    signed with no key here to check it) on storage the deployment declares trusted; never one changed or moved."""
    return found.ok or (storage_trusted() and found.state in ("unsigned", "nokey"))


def require(found: Authenticity, location: str, use: str) -> None:
    """Refuse (IntegrityError) a control file `use` (e.g. "a physical restore") may not read unauthenticated; a file
    merely unsigned passes where the deployment declares its storage trusted (accepted)."""
    if found.ok:
        return
    if accepted(found):
        log.warning("%s is %s; used because the deployment declares its storage trusted (%s)", location,
                    found.describe(), TRUSTED_ENV)
        return
    raise IntegrityError(
        f"{location} is {found.describe()}. {use[0].upper() + use[1:]} uses only control files lastline signed with the "
        f"deployment's storage key ({KEY_CONN_ENV}), checked before any byte of the backup is used, so nothing was "
        "used. Restore a backup written with the key; if only lastline can write this storage, the deployment may "
        f"declare it trusted ({TRUSTED_ENV}=true)."
    )
