"""storage.control: a control file read within bounds (size cap, nesting, JSON only), and its MAC field taken off."""
from __future__ import annotations

import hashlib
import json

import pytest

from lastline.storage import auth, control
from lastline.storage.base import Unreadable
from lastline.storage.file import FileStorage


def nested(depth: int) -> bytes:
    return ("[" * (depth - 1) + "{}" + "]" * (depth - 1)).encode()


@pytest.mark.parametrize(("data", "value"), [
    (b'{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
    (b"[]", []),
    ('{"name": "café"}'.encode(), {"name": "café"}),
    (nested(control.MAX_DEPTH), json.loads(nested(control.MAX_DEPTH))),
], ids=["object", "empty-list", "utf8", "at-the-depth-limit"])
def test_parse_reads_json(data, value):
    assert control.parse(data, "x/manifest.json") == value


@pytest.mark.parametrize(("data", "reason"), [
    (b"\xff{}", "UnicodeDecodeError"),
    (b"{not json", "JSONDecodeError"),
    (b"", "JSONDecodeError"),
    (nested(control.MAX_DEPTH + 1), f"nested more than {control.MAX_DEPTH} deep"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
], ids=["bad-utf8", "not-json", "empty", "one-past-the-depth-limit", "deeper-than-python-recursion"])
def test_parse_refuses_what_lastline_never_writes(data, reason):
    with pytest.raises(Unreadable, match="x/manifest.json is unreadable") as err:
        control.parse(data, "x/manifest.json")
    assert reason in err.value.reason


@pytest.mark.parametrize(("env", "cap"), [(None, 64 << 20), ("1", 1 << 20), ("0.5", 1 << 19), ("0", 1), ("lots", 64 << 20)],
                         ids=["default", "one-mb", "fraction", "at-least-one-byte", "not-a-number-is-the-default"])
def test_max_bytes(monkeypatch, env, cap):
    if env is None:
        monkeypatch.delenv("LASTLINE_CONTROL_FILE_MAX_MB", raising=False)
    else:
        monkeypatch.setenv("LASTLINE_CONTROL_FILE_MAX_MB", env)
    assert control.max_bytes() == cap


def test_a_file_over_the_cap_is_refused_without_parsing(tmp_path):
    store = FileStorage(str(tmp_path))
    store.write_bytes("big.json", b'{"a": "' + b"x" * 100 + b'"}')
    with pytest.raises(Unreadable):
        control.read_bytes(store, "big.json", cap=50)
    assert len(control.read_bytes(store, "big.json", cap=200)) == 109


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned-without-a-key", "signed-with-the-deployment-key"])
def test_write_then_read_round_trips_and_drops_the_mac_field(tmp_path, monkeypatch, signed):
    keys = auth.Keys("k1", {"k1": b"k" * 32})
    monkeypatch.setattr(auth, "deployment_keys", lambda: keys if signed else None)
    store = FileStorage(str(tmp_path))
    control.write(store, "b1/manifest.json", json.dumps({"kind": "physical", "n": 1}, indent=1))
    raw = store.read_bytes("b1/manifest.json", 1 << 20)
    assert (b"lastline_mac" in raw) is signed
    found = control.read(store, "b1/manifest.json")
    assert found.data == {"kind": "physical", "n": 1}
    assert found.sha256 == hashlib.sha256(raw).hexdigest()
    assert (found.auth.ok, found.auth.state) == ((True, "ok") if signed else (False, "unsigned"))
