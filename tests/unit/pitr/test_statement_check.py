"""pitr.statement_check: which archived statements a physical base's replay runs: data changes and definitions pass;
anything reaching beyond the data (accounts, grants, files, plugins, global settings, replication, system schemas,
engines that leave the datadir, a second statement, a client command) is named. Read as the server reads it in the
event's sql_mode."""
from __future__ import annotations

import pytest

from lastline.pitr.statement_check import ANSI_QUOTES, NO_BACKSLASH_ESCAPES, ORACLE, statement_problem
from lastline.pitr.statements import Query, Status


def query(text: bytes, db: str = "shop", sql_mode: int | None = 0, charset: tuple[int, int, int] | None = None) -> Query:
    return Query(0, 1, db, 0, Status(sql_mode=sql_mode, charset=charset), text)


@pytest.mark.parametrize("text", [
    b"INSERT INTO t VALUES (1, 'a;b')", b"UPDATE `a b`.`c.d` SET x = 1", b"DELETE FROM t WHERE id = 3",
    b"BEGIN", b"COMMIT", b"COMMIT WORK", b"ROLLBACK TO sp1", b"SAVEPOINT sp1", b"XA PREPARE 'x'",
    b"CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB", b"ALTER TABLE t ADD COLUMN c INT", b"DROP TABLE IF EXISTS t",
    b"CREATE DATABASE shop2", b"TRUNCATE TABLE t", b"RENAME TABLE a TO b", b"FLUSH TABLES",
    b"CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW BEGIN SET NEW.a = 1; END",
    b"INSERT INTO t VALUES ('GRANT ALL')", b"/* GRANT */ INSERT INTO t VALUES (1)",
], ids=["insert", "update-quoted-names", "delete", "begin", "commit", "commit-work", "rollback-to", "savepoint",
        "xa-prepare", "create-table-innodb", "alter-table", "drop-table", "create-database", "truncate", "rename-table",
        "flush-tables", "trigger-with-body", "grant-inside-a-string", "grant-inside-a-comment"])
def test_data_changes_and_definitions_pass(text):
    assert statement_problem(query(text)) is None


@pytest.mark.parametrize(("text", "why"), [
    (b"GRANT ALL ON *.* TO x", "it is 'GRANT'"),
    (b"INSERT INTO t SELECT LOAD_FILE('/etc/shadow')", "it holds LOAD_FILE"),
    (b"SELECT * FROM t INTO OUTFILE '/tmp/x'", "it holds OUTFILE"),
    (b"CREATE USER x", "other than a table, database"),
    (b"SET GLOBAL read_only = 0", "it is 'SET'"),
    (b"INSERT INTO t VALUES (1); DROP TABLE u", "it holds a second statement"),
    (b"INSERT INTO mysql.user VALUES (1)", "it names mysql"),
    (b"DROP DATABASE mysql", "it names mysql"),
    (b"CREATE TABLE t (id INT) ENGINE=CONNECT", "it uses ENGINE CONNECT"),
    (b"INSERT INTO t SELECT `load_file`('/etc/shadow')", "it calls `load_file`"),
    (b"/*!50000 GRANT ALL ON *.* TO x */", "it is 'GRANT'"),
    (b"delimiter //", "what the mariadb client reads as its own command"),
    (b"INSERT INTO t VALUES (1) \\C latin1", "the mariadb client reads as its own command"),
    (b"INSERT INTO t VALUES (@@global.x)", "it names @@global.x"),
    (b"BEGIN NOT ATOMIC SELECT 1; END", "a compound statement"),
    (b"CREATE PROCEDURE p() BEGIN SET PASSWORD FOR app = 'x'; END", "it sets a password or role"),
    (b"   ", "it holds no statement"),
    (b"SHUTDOWN", "not a data change"),
], ids=["grant", "load-file", "outfile", "create-user", "set-global", "second-statement", "system-schema-table",
        "drop-system-schema", "engine-outside-the-datadir", "function-named-in-quotes", "executable-comment",
        "client-delimiter", "client-charset-command", "global-variable", "compound-begin", "password-in-a-body",
        "empty", "shutdown"])
def test_what_reaches_beyond_the_data_is_named(text, why):
    problem = statement_problem(query(text))
    assert problem is not None and why in problem


@pytest.mark.parametrize(("db", "why"), [("mysql", "its default database is 'mysql'"), ("a`b", "its default database is 'a`b'")],
                         ids=["system-schema", "backtick-in-the-name"])
def test_the_default_database_counts(db, why):
    assert statement_problem(query(b"INSERT INTO t VALUES (1)", db=db)) == why


def test_a_multibyte_client_charset_that_can_hide_a_quote_is_refused():
    assert "collation id 28" in statement_problem(query(b"INSERT INTO t VALUES (1)", charset=(28, 28, 8)))
    assert statement_problem(query(b"INSERT INTO t VALUES (1)", charset=(45, 45, 45))) is None  # utf8mb4


@pytest.mark.parametrize(("text", "mode", "passes"), [
    (b'INSERT INTO t VALUES ("GRANT")', 0, True),
    (b'INSERT INTO "t" VALUES (1)', ANSI_QUOTES, True),
    (b"INSERT INTO t VALUES ('a\\'; GRANT ALL ON *.* TO x; -- ')", 0, True),
    (b"INSERT INTO t VALUES ('a\\'); GRANT ALL ON *.* TO x; -- ')", NO_BACKSLASH_ESCAPES, False),
    (b"INSERT INTO t VALUES (1)", ORACLE, False),
], ids=["double-quoted-string", "ansi-quoted-name", "escaped-quote", "no-backslash-escapes-ends-the-string",
        "oracle-mode-refused"])
def test_the_events_sql_mode_decides_how_it_reads(text, mode, passes):
    assert (statement_problem(query(text, sql_mode=mode)) is None) is passes
