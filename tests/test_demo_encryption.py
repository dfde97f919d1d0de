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


def test_a_key_file_a_killed_try_left_empty_is_made_anew_and_then_kept(tmp_path, monkeypatch):
    """The demo's keys (the encryption keys among them): an empty file (a try killed between its creation and its
    write) gets a key, 0600; the next call returns the same key."""
    monkeypatch.setattr(demo, "DEMO", tmp_path)
    (tmp_path / "encryption-1.key").write_text("")
    made = demo._key("encryption-1")
    assert len(made) >= 32 and (tmp_path / "encryption-1.key").stat().st_mode & 0o777 == 0o600
    assert demo._key("encryption-1") == made and demo._key("encryption-2") != made
    assert ENCRYPTION_CONN in demo.CONNECTION_IDS
