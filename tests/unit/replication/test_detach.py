"""Detaching a server from replication (lastline.replication.detach) on a small replica of this module's own (started
here, replicating from the suite's shared source by GTID, stopped by its PID): what check refuses (a protected server,
an option file that would re-attach it, its secrets never shown) and what it plans, verify on a server still attached,
then the detach for real, its verify now and after a restart, a re-run, and open_for_writes with and without asking."""
from __future__ import annotations

import re
import time

import pytest

from conftest import attach_replica, set_conn
from lastline.core.errors import ConfigError, ProtectedTargetError, ReplicationError
from lastline.core.option_files import Setting
from lastline.core.servers import Server
from lastline.core.sql import quote_ident
from lastline.replication import detach
from lastline.replication.plans import Detached, DetachPlan, ReadOnly, StillDetached
from lastline_dev.sandbox import Instance

STATEMENTS = ["STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL gtid_slave_pos = ''"]  # MariaDB, the default connection
PROBE_DB = "ll_dt`probe db"


def _root(inst: Instance) -> Server:
    return Server(conn_id="root", socket=str(inst.sock), user="root")


def _arrives(inst: Instance, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _root(inst).query("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (PROBE_DB,))[0][0]:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def replica(sandbox_root, source):
    """A small server replicating from the source (from where the source is now)."""
    inst = Instance(sandbox_root, "dt_replica")
    inst.create()
    set_conn("t_dt_replica", inst)
    attach_replica(inst, source)
    yield inst
    inst.destroy()  # stops it by its own PID
    with _root(source).session() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_ident(PROBE_DB)}")


@pytest.mark.parametrize("setting, shown", [
    (Setting("/etc/my.cnf.d/old.cnf", 4, "mysqld", "master-host", "10.9.8.7"),
     "/etc/my.cnf.d/old.cnf:4 [mysqld]: master-host=10.9.8.7"),
    (Setting("/etc/my.cnf", 12, "mariadb", "master-password", "s3cret"), "/etc/my.cnf:12 [mariadb]: master-password=****"),
    (Setting("/etc/my.cnf", 1, "mysqld", "master-user", "repl"), "/etc/my.cnf:1 [mysqld]: master-user=repl"),
    (Setting("/etc/my.cnf", 2, "mysqld", "read-only", "1"), "/etc/my.cnf:2 [mysqld]: read-only=1"),
], ids=["a host", "a password, masked", "a user", "read-only"])
def test_shown(setting, shown):
    assert detach._shown(setting) == shown


@pytest.mark.parametrize("restart, read_only_off, expected", [
    (True, False, (True, False)),
    ("false", "true", (False, True)),
    ("0", "yes", (False, True)),
    ("off", 1, (False, True)),
    (False, "no", (False, False)),
    ("None", "null", (True, False)),
    ("", None, (True, False)),
], ids=["booleans", "words", "digits and yes", "off and 1", "no", "an empty Param rendered: its default", "empty"])
def test_check_plans_the_detach_of_a_replica(replica, restart, read_only_off, expected):
    plan = detach.check("t_dt_replica", restart, read_only_off)
    assert plan.target_conn_id == "t_dt_replica" and plan.flavour.startswith("MariaDB 1")
    (connection,) = plan.connections
    assert re.fullmatch(r"connection \(default\): IO (Yes|Connecting), SQL Yes, \S+ s behind", connection), connection
    assert plan.statements == STATEMENTS
    assert (plan.restart, plan.read_only_off) == expected
    assert DetachPlan.of(plan.to_dict()) == plan


@pytest.mark.parametrize("restart, read_only_off, refused", [
    ("ture", False, "the Param restart is 'ture': write true or false"),
    (True, "maybe", "the Param read_only_off is 'maybe': write true or false"),
], ids=["a typo in restart", "a word that is neither"])
def test_check_refuses_a_switch_that_is_neither_true_nor_false(replica, restart, read_only_off, refused):
    """A typo never reads as false: it would skip the restart that proves the detach holds."""
    with pytest.raises(ConfigError, match=refused):
        detach.check("t_dt_replica", restart, read_only_off)


def test_check_of_a_server_that_replicates_from_nothing_plans_the_same_statements(source):
    plan = detach.check("t_source")
    assert (plan.connections, plan.statements, plan.restart, plan.read_only_off) == ([], STATEMENTS, True, False)


@pytest.mark.parametrize("text, named, hidden", [
    ("[mysqld]\nmaster-host=10.9.8.7\n", [":2 [mysqld]: master-host=10.9.8.7"], []),
    ("[client]\nmaster-host=ignored.example\n[mysqld]\n# old setup\nloose_master_host = 10.9.8.7\n"
     "master-password=secret-pw\n", [":5 [mysqld]: master-host=10.9.8.7", ":6 [mysqld]: master-password=****"],
     ["secret-pw", "ignored.example"]),
    ("[mariadb]\nMaster_Port=3307\nmaster_user=repl\n", [":2 [mariadb]: master-port=3307", ":3 [mariadb]: master-user=repl"],
     []),
], ids=["a master-host", "a loose_ spelling and a password, a client group ignored", "mariadb group, any case"])
def test_check_refuses_option_files_that_would_reattach_it(replica, text, named, hidden):
    stale = replica.conf_d / "zz-old-master.cnf"
    stale.write_text(text)
    try:
        with pytest.raises(ReplicationError) as err:
            detach.check("t_dt_replica")
    finally:
        stale.unlink()
    message = str(err.value)
    assert "would re-attach it at the next restart" in message and message.endswith("Nothing was changed.")
    assert all(f"{stale}{n}" in message for n in named), message
    assert not any(h in message for h in hidden)


def test_a_client_group_alone_is_no_refusal(replica):
    stale = replica.conf_d / "zz-client.cnf"
    stale.write_text("[client]\nmaster-host=ignored.example\n")
    try:
        assert detach.check("t_dt_replica").statements == STATEMENTS
    finally:
        stale.unlink()


def test_check_refuses_a_protected_server(replica):
    set_conn("t_dt_prod", replica, protected=True)
    with pytest.raises(ProtectedTargetError, match="lastline never detaches, restarts or opens it for writes"):
        detach.check("t_dt_prod")


def test_verify_of_a_server_still_attached_names_what_is_left(replica):
    plan = detach.check("t_dt_replica", restart=False)
    with pytest.raises(ReplicationError, match=r"is not detached after the detach: connection \(default\): IO .*; "
                                               r"gtid_slave_pos is '[0-9-]+'"):
        detach.verify(plan)


def test_open_for_writes_not_asked_leaves_read_only_as_it_is(replica):
    plan = detach.check("t_dt_replica", read_only_off=False)
    with _root(replica).session() as cur:
        cur.execute("SET GLOBAL read_only = ON")
    try:
        assert detach.open_for_writes(plan) == ReadOnly("ON")
        assert replica.server().variables("read_only")["read_only"] == "ON"
    finally:
        with _root(replica).session() as cur:
            cur.execute("SET GLOBAL read_only = OFF")


@pytest.fixture(scope="module")
def detached(replica, source):
    """The replica detached for real (twice: a re-run changes nothing)."""
    plan = detach.check("t_dt_replica", restart=True, read_only_off=True)
    done = detach.detach(plan)
    assert done == Detached(STATEMENTS)
    assert detach.detach(plan) == done  # a re-run on a detached server runs the same statements, without error
    return plan, done


def test_detach_cuts_it_off_for_good_also_after_a_restart(detached, replica, source):
    plan, done = detached
    assert detach.verify(DetachPlan(**{**plan.to_dict(), "restart": False}), done) == StillDetached(False, 0.0)
    pid = replica.pid()
    still = detach.verify(plan, done)
    assert still.restarted and still.restart_seconds > 0 and replica.pid() not in (None, pid)
    assert replica.server().query("SHOW ALL SLAVES STATUS") == []
    with _root(source).session() as cur:
        cur.execute(f"CREATE DATABASE {quote_ident(PROBE_DB)}")
    assert not _arrives(replica, 2), "a write on the source arrived after the detach"


def test_open_for_writes_turns_read_only_off_and_warns_of_an_option_file_that_sets_it_again(detached, replica, caplog):
    plan, _done = detached
    sticky = replica.conf_d / "zz-read-only.cnf"
    sticky.write_text("[mysqld]\nread_only = 1\n[client]\nread-only=1\n")
    with _root(replica).session() as cur:
        cur.execute("SET GLOBAL read_only = ON")
    try:
        with caplog.at_level("WARNING"):
            assert detach.open_for_writes(plan) == ReadOnly("OFF")
    finally:
        sticky.unlink()
    assert replica.server().variables("read_only")["read_only"] == "OFF"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"t_dt_replica ({replica.server('t_dt_replica').user}@127.0.0.1:{replica.meta()['port']}) sets "
                        f"read_only again at the next restart: {sticky}:2 [mysqld]: read-only=1"], warnings
