"""lastline_dev.demo_encryption: the demo's encryption key connection before and after its rotation is what an operator
writes (keys_from_connection reads it), and the demo stores the rotated one among its connections."""
from __future__ import annotations

from lastline.storage.encryption_keys import keys_from_connection
from lastline_dev import demo
from lastline_dev.demo_encryption import ENCRYPTION_CONN, FIRST, SECOND, key_connection


def _keys(conn: dict):
    return keys_from_connection("the demo's", conn["conn_type"], conn.get("login") or "", conn.get("password") or "",
                                conn.get("extra") or {})


def test_before_the_rotation_the_first_key_alone_after_it_the_second_with_the_first_kept():
    secrets = {"encryption-1": "a" * 43, "encryption-2": "b" * 43}
    before, after = _keys(key_connection(secrets.__getitem__, rotated=False)), _keys(key_connection(secrets.__getitem__))
    assert before.current is not None and before.current.key_id == FIRST and before.held() == [FIRST]
    assert after.current is not None and after.current.key_id == SECOND and after.held() == [FIRST, SECOND]
    assert after.keks[FIRST].secret == before.current.secret  # the older key opens what it wrapped


def test_the_demo_stores_the_rotated_connection_with_its_others():
    assert ENCRYPTION_CONN in demo.CONNECTION_IDS
