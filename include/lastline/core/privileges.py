"""The global privileges lastline's connection accounts need, per use of a server, and which an account lacks.

A server is used as a **backup source** (logical and physical backups, the binlog archive) or as a **restore target**
(restores, staging refreshes, drills, point-in-time restores); a connection's extras say which it may be: a
protected server is only ever a source, one whose role is staging or drill only a target, any other may be both.

What is checked is the account's grants as the server reports them (SHOW GRANTS for the account and for each role it
has enabled at login): for a use, those on `*.*` (a backup of every database, a restore's account management and its
`SET GLOBAL` need them there); for one database (held_on), also the one database grant the server applies to it. MariaDB's split privileges
(BINLOG MONITOR, READ_ONLY ADMIN, ...) and MySQL's names (REPLICATION CLIENT, SUPER) are both accepted.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lastline.core.sql import as_text

BACKUP, RESTORE = "backup source", "restore target"


@dataclass(frozen=True)
class Need:
    """One privilege a use needs: any of `names` on *.* will do; `why` is what lastline does with it."""

    names: tuple[str, ...]
    why: str

    @property
    def label(self) -> str:
        return " or ".join(self.names)


NEEDS: dict[str, tuple[Need, ...]] = {
    BACKUP: (
        Need(("SELECT",), "read every table"),
        Need(("SHOW VIEW",), "read the views' definitions"),
        Need(("TRIGGER",), "read the triggers' definitions"),
        Need(("EVENT",), "read the events' definitions"),
        Need(("LOCK TABLES",), "lock the non-transactional tables for the snapshot"),
        Need(("RELOAD",), "open one consistent snapshot (backup stages, FLUSH)"),
        Need(("PROCESS",), "mariabackup's checks, and seeing the statements a backup waits for"),
        Need(("BINLOG MONITOR", "REPLICATION CLIENT", "SUPER"), "record the binlog position"),
    ),
    RESTORE: (
        Need(("SELECT",), "verify every restored table"),
        Need(("INSERT", ), "write lastline's own bookkeeping (_lastline)"),
        Need(("CREATE",), "create the restored databases"),
        Need(("DROP",), "set aside and drop what a forced restore replaces"),
        Need(("ALTER",), "set aside (rename) what a forced restore replaces"),
        Need(("CREATE USER",), "create and drop each run's own account"),
        Need(("GRANT OPTION",), "grant the run's account the restored databases only"),
        Need(("SUPER",), "tune the server for the load (SET GLOBAL), and put it back"),
        Need(("READ_ONLY ADMIN", "SUPER"), "write while read_only keeps the applications out"),
        Need(("BINLOG ADMIN", "SUPER"), "keep the restore out of the binary log (sql_log_bin)"),
    ),
}
_ON_ALL = re.compile(r"^GRANT (?P<privs>.+?) ON \*\.\* TO ", re.IGNORECASE)
_TO = re.compile(r" TO (?P<who>`(?:[^`]|``)*`(?:@`(?:[^`]|``)*`)?)")
_ON_DB = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<db>`(?:[^`]|``)+`)\.\* TO ", re.IGNORECASE)
_ALIASES = {"REPLICATION CLIENT": "BINLOG MONITOR", "SLAVE MONITOR": "REPLICA MONITOR"}


def uses(protected: bool, role: str | None) -> list[str]:
    """What a server may be used as: a protected one is only backed up, a staging or drill server only restored into."""
    if protected:
        return [BACKUP]
    if role in ("staging", "drill"):
        return [RESTORE]
    return [BACKUP, RESTORE]


def _privileges(privs: str, text: str) -> set[str]:
    """The privileges one GRANT line's list names (upper case, MySQL's names as MariaDB's)."""
    out = set()
    for priv in privs.split(","):
        name = re.sub(r"\s*\(.*\)$", "", priv.strip().upper())  # a column list belongs to a table grant
        out.add(_ALIASES.get(name, name))
    if re.search(r"WITH\b.*\bGRANT OPTION", text, re.IGNORECASE):
        out.add("GRANT OPTION")
    return out


def held(grants: Iterable[str]) -> set[str]:
    """The privileges `SHOW GRANTS` lines give on *.* (upper case; ALL PRIVILEGES and GRANT OPTION as themselves)."""
    out: set[str] = set()
    for line in grants:
        text = " ".join(str(line).split())
        if found := _ON_ALL.match(text):
            out |= _privileges(found["privs"], text)
    return out


def _pattern(name: str) -> re.Pattern[str]:
    """A database grant's name as the server matches it: `%` and `_` are wildcards unless escaped with a backslash."""
    out, chars = [], iter(name)
    for ch in chars:
        if ch == "\\":
            out.append(re.escape(next(chars, "\\")))
        else:
            out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


def held_on(grants: Iterable[str], database: str) -> set[str]:
    """The privileges `SHOW GRANTS` lines give on every table of `database`: those on *.* and, for each grantee (the
    account, its role), the one database grant the server applies, as MariaDB's acl_get does: of the grants whose
    name or pattern matches, the most specific (a name without wildcards, else the longest literal prefix); the
    grants of one grantee are not added up. A grant on single tables does not count."""
    lines = [str(line) for line in grants]
    out = held(lines)
    chosen: dict[str, tuple[tuple[int, int], set[str]]] = {}
    for text in lines:
        found = _ON_DB.match(text)
        if not found:
            continue
        name = found["db"][1:-1].replace("``", "`")
        if not _pattern(name).fullmatch(database):
            continue
        who = _TO.search(text[found.end() - 4:])
        grantee = who["who"] if who else ""
        rank = _specificity(name)
        if grantee not in chosen or rank > chosen[grantee][0]:
            chosen[grantee] = (rank, _privileges(found["privs"], text))
    for _, privs in chosen.values():
        out |= privs
    return out


def _specificity(name: str) -> tuple[int, int]:
    """How specific a database grant's name is: (1, -) without a wildcard, else (0, the length of its literal prefix)."""
    prefix = 0
    chars = iter(name)
    for ch in chars:
        if ch in "%_":
            return 0, prefix
        if ch == "\\":
            next(chars, None)
        prefix += 1
    return 1, prefix


def account_grants(cur: Any) -> tuple[str, list[str], list[str]]:
    """The session's account (CURRENT_USER()), its SHOW GRANTS lines with those of the role it has enabled, and the
    roles whose grants were read (MariaDB's SHOW GRANTS holds the enabled role's; MySQL's names the role only)."""
    cur.execute("SELECT CURRENT_USER()")
    account = str(cur.fetchone()[0])
    cur.execute("SHOW GRANTS")
    grants = [as_text(r[0]) for r in cur.fetchall()]
    cur.execute("SELECT CURRENT_ROLE()")
    role = (cur.fetchone() or [None])[0]
    roles = [as_text(role)] if role and as_text(role) != "NONE" else []
    for name in list(roles):
        try:
            cur.execute("SHOW GRANTS FOR %s", (name,))
            grants += [as_text(r[0]) for r in cur.fetchall()]
        except Exception:  # noqa: BLE001 - a role spelled `r`@`%` (MySQL): its grants are not read
            roles.remove(name)
    return account, grants, roles


def missing(have: set[str], use: str) -> list[Need]:
    """The needs of `use` none of whose names `have` holds (ALL PRIVILEGES holds all but GRANT OPTION)."""
    every = "ALL PRIVILEGES" in have or "ALL" in have
    return [n for n in NEEDS[use]
            if not any(_ALIASES.get(name, name) in have or (every and name != "GRANT OPTION") for name in n.names)]


def verdict(have: set[str], for_uses: list[str]) -> tuple[bool, list[str]]:
    """Whether the account holds what every use needs, and one line per use: what it holds, or what is missing and why."""
    lines, ok = [], True
    for use in for_uses:
        lacking = missing(have, use)
        if lacking:
            ok = False
            lines.append(f"Missing on *.* for a {use}: " + "; ".join(f"{n.label} ({n.why})" for n in lacking) + ".")
        else:
            lines.append(f"As a {use}: every privilege lastline needs is granted on *.*.")
    return ok, lines
