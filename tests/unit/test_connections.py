"""connections: Airflow connections (here from AIRFLOW_CONN_* variables, as a deployment may keep them) turned into
lastline's objects: a server, where commands run, a connection's extras, a key kept as a generic connection's
password (refused from any other kind), and a key ring; a connection that cannot be read says how to create it."""
from __future__ import annotations

import json

import pytest

from lastline import connections
from lastline.core.errors import ConfigError
from lastline.core.hosts import LOCAL
from lastline.core.servers import Server


@pytest.fixture
def conns(monkeypatch):
    """Set Airflow connections by id for one test."""
    def put(conn_id: str, **fields) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return put


def test_server_of_a_lastline_connection(conns):
    conns("unit_conn_db", conn_type="lastline", host="db1", port=3307, login="admin", password="pw-123456",
          extra={"datadir": "/var/lib/mysql", "role": "drill"})
    server = connections.server("unit_conn_db")
    assert server == Server("unit_conn_db", host="db1", port=3307, user="admin", password="pw-123456",
                            datadir="/var/lib/mysql", role="drill", limits={})
    assert server.runner() is LOCAL


def test_a_server_of_another_kind_of_connection_is_refused(conns):
    conns("unit_conn_http", conn_type="http", host="example.org")
    with pytest.raises(ConfigError, match="is of type 'http': a server lastline backs up or restores into is a lastline"):
        connections.server("unit_conn_http")


@pytest.mark.parametrize("read", [connections.server, connections.secret], ids=["server", "secret"])
def test_a_missing_connection_says_how_to_create_it(read):
    with pytest.raises(ConfigError, match="could not be read .* set AIRFLOW_CONN_UNIT_CONN_NOWHERE"):
        read("unit_conn_nowhere")


def test_host_for_without_a_connection_is_here():
    assert connections.host_for(None) is LOCAL and connections.host_for("") is LOCAL


@pytest.mark.parametrize(("conn_id", "fields", "extras"), [
    (None, None, {}),
    ("unit_conn_nowhere", None, {}),
    ("unit_conn_aws", {"conn_type": "aws", "extra": {"region_name": "eu-west-1"}}, {"region_name": "eu-west-1"}),
    ("unit_conn_bare", {"conn_type": "aws"}, {}),
], ids=["no-id", "unreadable", "aws-extras", "no-extras"])
def test_extras(conns, conn_id, fields, extras):
    if fields:
        conns(conn_id, **fields)
    assert connections.extras(conn_id) == extras


@pytest.mark.parametrize(("fields", "refused"), [
    ({"conn_type": "generic", "password": "the-masking-key"}, None),
    ({"password": "the-masking-key"}, None),
    ({"conn_type": "mysql", "password": "the-masking-key"}, "is of type 'mysql': a key must be kept in a connection"),
    ({"conn_type": "generic"}, "has no password: put the secret in its password field"),
], ids=["generic", "no-type-is-generic", "a-servers-password", "no-password"])
def test_secret(conns, fields, refused):
    conns("unit_conn_key", **fields)
    if refused is None:
        assert connections.secret("unit_conn_key") == "the-masking-key"
    else:
        with pytest.raises(ConfigError, match=refused):
            connections.secret("unit_conn_key")


def test_key_ring(conns):
    conns("unit_conn_ring", conn_type="generic", login="k2", password="secret-two",
          extra={"keys": {"k1": "secret-one"}})
    assert connections.key_ring("unit_conn_ring") == ("generic", "k2", "secret-two", {"keys": {"k1": "secret-one"}})


def test_key_ring_hands_every_secret_to_the_log_masker(conns, monkeypatch):
    import airflow.sdk.log

    masked: list[str] = []
    monkeypatch.setattr(airflow.sdk.log, "mask_secret", masked.append)
    conns("unit_conn_ring", conn_type="generic", login="k2", password="secret-two",
          extra={"keys": {"k1": "secret-one"}, "identities": {"ops": "private-x25519"}, "recipients": {"ops": "public"}})
    connections.key_ring("unit_conn_ring")
    assert {"private-x25519", "secret-one", "secret-two"} <= {m for m in masked if isinstance(m, str)}
