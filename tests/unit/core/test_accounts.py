"""core.accounts: the names, grant patterns and passwords of the accounts a restore runs under: a run account's name
is new each time, an objects owner's is the same for the same databases, a database name matches itself only in a
GRANT, quotes in an account are doubled, and a password is derived from a nonce (never stored) and sent as the hash
the server itself computes."""
from __future__ import annotations

import re

import pytest

from lastline.core.accounts import (
    OWNER_PREFIX,
    RUN_PREFIX,
    _unescape,
    account_sql,
    derive_password,
    grant_pattern,
    owner_name,
    password_hash,
    run_account,
)
from lastline.core.errors import ConfigError
from lastline.core.servers import Server


def test_run_account_names_are_new_each_time():
    from lastline.core.accounts import run_account_name

    names = {run_account_name() for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(RUN_PREFIX + "[0-9a-f]{12}", n) for n in names)


@pytest.mark.parametrize(("one", "other", "same"), [
    (["a", "b"], ["b", "a"], True),
    (["a"], ["a", "b"], False),
    (["a,b"], ["a", "b"], False),
], ids=["order-ignored", "another-set", "a-comma-is-no-separator"])
def test_owner_name_is_one_per_set_of_databases(one, other, same):
    assert (owner_name(one) == owner_name(other)) is same
    assert re.fullmatch(OWNER_PREFIX + "[0-9a-f]{16}", owner_name(one))
    assert len(owner_name(one)) <= 32  # MariaDB user names: 80 chars, MySQL: 32


@pytest.mark.parametrize(("database", "pattern"), [
    ("shop", "`shop`"),
    ("my_db", "`my\\_db`"),
    ("100%", "`100\\%`"),
    ("a\\b", "`a\\\\b`"),
    ("we`ird", "`we``ird`"),
], ids=["plain", "underscore", "percent", "backslash", "backtick"])
def test_grant_pattern_matches_the_name_literally(database, pattern):
    assert grant_pattern(database) == pattern


@pytest.mark.parametrize("database", ["shop", "my_db", "100%_x", "a\\b", "a\\_b"],
                         ids=["plain", "underscore", "percent-underscore", "backslash", "backslash-underscore"])
def test_a_stored_grant_pattern_reads_back_as_the_database(database):
    stored = grant_pattern(database)[1:-1].replace("``", "`")  # as mysql.db keeps it: no quotes
    assert _unescape(stored) == database


@pytest.mark.parametrize(("user", "host", "sql"), [
    ("lastline_run_ab", "localhost", "'lastline_run_ab'@'localhost'"),
    ("o'brien", "10.0.%", "'o''brien'@'10.0.%'"),
    ("a\\", "h", "'a\\\\'@'h'"),
], ids=["plain", "quote-and-wildcard-host", "trailing-backslash"])
def test_account_sql(user, host, sql):
    assert account_sql(user, host) == sql


def test_derived_passwords_depend_on_the_admin_password_the_account_and_the_nonce():
    base = derive_password("admin-pw", "lastline_run_1", "nonce")
    assert base == derive_password("admin-pw", "lastline_run_1", "nonce")
    others = {derive_password("other-pw", "lastline_run_1", "nonce"), derive_password("admin-pw", "lastline_run_2", "nonce"),
              derive_password("admin-pw", "lastline_run_1", "nonce2"), derive_password(None, "lastline_run_1", "nonce")}
    assert base not in others and len(others) == 4
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", base)  # 32 bytes, URL-safe base64 without padding: no quoting needed


def test_password_hash_shape():
    assert re.fullmatch(r"\*[0-9A-F]{40}", password_hash("x"))
    assert password_hash("x") != password_hash("y")


@pytest.mark.parametrize("password", ["plain", "ünïcødé-and-'quotes'", derive_password("admin", "u", "n")],
                         ids=["plain", "unicode-quotes", "a-derived-one"])
def test_password_hash_is_the_servers_own(target, password):
    with target.server().session() as cur:
        cur.execute("SELECT PASSWORD(%s)", (password,))
        (expected,) = cur.fetchone()
    expected = expected.decode() if isinstance(expected, bytes) else expected
    assert password_hash(password) == expected


@pytest.mark.parametrize(("user", "databases", "refused"), [
    ("root", ["shop"], "is not a run account's name"),
    (RUN_PREFIX + "abc", [], "needs the databases it may write"),
], ids=["not-a-run-account", "no-database"])
def test_run_account_refuses_before_touching_the_server(user, databases, refused):
    nowhere = Server("unit_nowhere", host="127.0.0.1", port=1)
    with pytest.raises(ConfigError, match=refused):
        run_account(nowhere, user, databases)


def test_a_replay_account_has_one_session_and_a_drop_ends_it(target):
    """A point-in-time replay's account (pitr.interleave): one session only (a statement that set its password logs no
    one else in), a leftover session of a killed worker ended when it is made again, and its sessions ended when it is
    dropped (a dropped account's session goes on running what it runs)."""
    from lastline.core.accounts import drop, replay_account

    admin, user = target.server(), RUN_PREFIX + "unitreplay"
    admin.query("CREATE DATABASE IF NOT EXISTS `unit replay acc`")
    admin.query("CREATE DATABASE IF NOT EXISTS _lastline")
    admin.query("CREATE TABLE IF NOT EXISTS _lastline.pitr_statements_unit (gtid VARCHAR(80) PRIMARY KEY)")
    try:
        narrow = replay_account(admin, user, ["unit replay acc"], "`_lastline`.`pitr_statements_unit`")
        first = narrow.connect()
        with pytest.raises(Exception, match="max_user_connections|1226"):
            narrow.connect().close()
        again = replay_account(admin, user, ["unit replay acc"], "`_lastline`.`pitr_statements_unit`")
        with pytest.raises(Exception):  # the leftover session was ended
            first.cursor().execute("SELECT 1")
        live = again.connect()
        assert drop(admin, user)
        assert admin.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", (user,)) == [(0,)]
        with pytest.raises(Exception):
            live.cursor().execute("SELECT 1")
    finally:
        drop(admin, user)
        admin.query("DROP TABLE IF EXISTS _lastline.pitr_statements_unit")
        admin.query("DROP DATABASE IF EXISTS `unit replay acc`")
