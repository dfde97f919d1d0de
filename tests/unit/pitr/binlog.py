"""Binlog bytes built with lastline's own event encoders (lastline.pitr.events), for the pure tests of the readers:
a format description in MariaDB's layout, then whole transactions. Nothing here talks to a server."""
from __future__ import annotations

import struct

from lastline.pitr import events
from lastline.pitr.split import POST_HEADER

SERVER_ID = 1


def format_description(checksum: bool, in_use: bool = False, version: int = 4, lengths: dict[int, int] | None = None) -> bytes:
    """A format description event: binlog version, server version, timestamp, header length, the post-header length
    of every event type (MariaDB's for those lastline reads), and the checksum algorithm (1: CRC32)."""
    table = bytearray(max(POST_HEADER) + 8)
    for kind, n in {**POST_HEADER, **(lengths or {})}.items():
        table[kind - 1] = n
    body = (struct.pack("<H", version) + b"10.11.9-MariaDB-log".ljust(50, b"\0") + struct.pack("<I", 0)
            + bytes([events.HEADER_LEN]) + bytes(table) + bytes([1 if checksum else 0]))
    return events._event(0, events.FORMAT_DESCRIPTION, SERVER_ID, 0, body, checksum, events.IN_USE if in_use else 0)


def gtid(seq: int, checksum: bool, ts: int = 1000, domain: int = 0, flags2: int = events.FL_TRANSACTIONAL) -> bytes:
    return events.gtid_event(ts, SERVER_ID, 0, seq, domain, flags2, None, checksum)


def query(text: bytes, checksum: bool, ts: int = 1000) -> bytes:
    return events.query_event(ts, SERVER_ID, 0, 7, b"", text, checksum)


def xid(checksum: bool, ts: int = 1000) -> bytes:
    return events.xid_event(ts, SERVER_ID, 0, 99, checksum)


def transaction(seq: int, checksum: bool, ts: int = 1000, domain: int = 0) -> bytes:
    """A transactional event group: GTID, BEGIN, a statement, XID."""
    return gtid(seq, checksum, ts, domain) + query(b"BEGIN", checksum, ts) + query(b"INSERT INTO t VALUES (1)", checksum, ts) \
        + xid(checksum, ts)


def binlog(*groups: bytes, checksum: bool = False, in_use: bool = False) -> bytes:
    """A whole binlog file: the magic, its format description, then `groups` as given."""
    return events.MAGIC + format_description(checksum, in_use) + b"".join(groups)


def split_events(data: bytes) -> list[bytes]:
    """A run of whole events, one by one."""
    out, at = [], 0
    while at < len(data):
        size = events.HEADER.unpack_from(data, at)[3]
        out.append(data[at:at + size])
        at += size
    return out
