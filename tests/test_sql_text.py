"""The schema checks built on SQL read as the server reads it (logical.restore.schema_checks; the tokenizer itself is
tested in tests/unit/logical/format/test_sql_text.py): every attack a review found against the regex checks, the DEFINER
and event edits; then a real backup of the store dataset and the edge-case corpus, checked and rebuilt on a real server."""
from __future__ import annotations

import json

import pytest

from lastline.core.errors import IntegrityError
from lastline.logical.restore.schema_checks import checked_create, validate_schema
from lastline.logical.restore.schema_definers import disabled_event, with_definer, without_definer
from lastline.logical.restore.schema_grants import checked_grants
from lastline.logical.restore.schema_session import database_create
from lastline.logical.restore.schema_tables import definition_name, split_deferred

# --- the attacks a review found against the regex checks (each passed them) -------------------------------------
BASE = ("CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `c` int(11) DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  KEY `k` (`c`)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
STEAL = "SELECT `authentication_string` AS `c` FROM `mysql`.`global_priv` UNION ALL SELECT `x` FROM `other`.`secret`"


def table(create: str, name: str = "t") -> dict:
    return {"schema": "db", "name": name, "create": create}


@pytest.mark.parametrize("create", [
    BASE + f" /* ' */ {STEAL} /* ' */",  # a quote in a comment made the regex read the SELECT as a string
    BASE + f" /* ' */ /*!50000 {STEAL} */ /* ' */",  # and an executable comment is code
    BASE + f" # '\n{STEAL} # '",
    BASE + f" -- '\n{STEAL} -- '",
    BASE.replace("DEFAULT NULL", 'DEFAULT NULL COMMENT "x"'),  # a name under ANSI_QUOTES: never printed by SHOW CREATE TABLE
    BASE.replace("ENGINE=InnoDB", "ENGINE=MRG_MyISAM INSERT_METHOD=LAST UNION=(`other`.`secret`)"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=InnoDB DATA DIRECTORY='/var/lib/mysql-files'"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=MyISAM INDEX DIRECTORY='/tmp'"),
    BASE + "\n PARTITION BY HASH (`id`)\n(PARTITION `p0` DATA DIRECTORY = '/tmp/x' ENGINE = InnoDB)",
    BASE + "\n PARTITION BY HASH (`id`)\n(PARTITION `p0` ENGINE = BLACKHOLE)",
    BASE.replace("ENGINE=InnoDB", "ENGINE=FEDERATED CONNECTION='mysql://u:p@elsewhere:3306/db/t'"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=CONNECT TABLE_TYPE=MYSQL"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=SPIDER"), BASE.replace("ENGINE=InnoDB", "ENGINE=BLACKHOLE"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=S3"), BASE.replace("ENGINE=InnoDB", "ENGINE=Wh4tever"),
    BASE.replace("ENGINE=InnoDB", "ENGINE=InnoDB TABLESPACE `innodb_system`"),
    BASE.replace("`c` int(11) DEFAULT NULL", "`c` int(11) DEFAULT nextval(`other`.`seq`)"),
    BASE.replace("`c` int(11) DEFAULT NULL", "`c` int(11) REFERENCES `other`.`t` (`id`)"),
    BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`), RENAME TO `other`.`planted`\n"),  # the held-back index line
    BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`) COMMENT 'x' /* ' */, DROP PRIMARY KEY /* ' */\n"),
    BASE.replace("(\n  `id`", "(LIKE `other`.`secret`,\n  `id`"),
    BASE.replace("CREATE TABLE `t`", "CREATE TABLE `t` /*!50000 (`x` int) */ SELECT 1 AS `y` /* */"),
])
def test_a_table_statement_that_reaches_past_its_table_is_refused(create):
    with pytest.raises(IntegrityError, match="statement of table db.t .*Nothing of it was run"):
        checked_create("tables", table(create), ["db"])


def test_a_held_back_index_is_exactly_one_index():
    with pytest.raises(IntegrityError):
        split_deferred(BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`), RENAME TO `other`.`planted`\n"))
    # text that a comment hides from the server is not a definition, and is never held back to run later
    hidden = BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`) /*\n  KEY `k2` (`c`), RENAME TO `other`.`planted`\n  */\n")
    table_sql, indexes, fks = split_deferred(hidden)
    assert indexes == ["KEY `k` (`c`)"] and fks == [] and "RENAME" not in " ".join(indexes)
    for bad in ("KEY `k` (`c`) USING BTREE IGNORED, ALTER COLUMN `c` SET DEFAULT 1", "KEY (`c`)", "KEY `k` ((`c` + 1))",
                "KEY `k` (`c`) WITH PARSER", "CONSTRAINT `f` FOREIGN KEY (`c`) REFERENCES `p` (`id`) ON DELETE DROP",
                "CONSTRAINT `f` FOREIGN KEY (`c`) REFERENCES `p` (`id`) /*!50000 ON DELETE CASCADE */"):
        with pytest.raises(IntegrityError):
            split_deferred(BASE.replace("KEY `k` (`c`)", bad))


def test_foreign_keys_reach_only_the_databases_being_restored():
    fk = BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`),\n  CONSTRAINT `f` FOREIGN KEY (`c`) REFERENCES `db2`.`p` (`id`)\n")
    for databases in (["db", "db2"], ["db2"], frozenset({"db2"}), {"db", "db2"}):  # however the caller holds them
        assert checked_create("tables", table(fk), databases) == fk
    for databases in (["db"], None, [], frozenset(), frozenset({"db", "other"})):
        with pytest.raises(IntegrityError, match="database `db2`, which this restore does not restore"):
            checked_create("tables", table(fk), databases)
    same_db = fk.replace("`db2`.`p`", "`p`")
    assert checked_create("tables", table(same_db)) == same_db
    own = fk.replace("`db2`.`p`", "`db`.`p`")  # its own database, named: whatever `databases` holds
    for databases in (None, [], frozenset()):
        assert checked_create("tables", table(own), databases) == own
    assert split_deferred(fk)[2] == ["CONSTRAINT `f` FOREIGN KEY (`c`) REFERENCES `db2`.`p` (`id`)"]


TRIGGER = "CREATE DEFINER=`u`@`%` TRIGGER `tr` AFTER INSERT ON `t` FOR EACH ROW BEGIN\n  INSERT INTO `log` VALUES (NEW.id);\nEND"


@pytest.mark.parametrize("kind, obj", [
    ("triggers", {"table": "t", "create": TRIGGER + "; DROP DATABASE `x`"}),
    ("triggers", {"table": "t", "create": TRIGGER.replace("NEW.id);\nEND", "NEW.id); END; DROP DATABASE `x`; BEGIN\nEND")}),
    ("triggers", {"table": "t", "create": TRIGGER.replace("BEGIN\n", "").replace("\nEND", " DROP DATABASE `x`")}),
    ("events", {"create": "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO DELETE FROM `t`; DROP DATABASE `x`"}),
    ("routines", {"type": "PROCEDURE", "create": "CREATE PROCEDURE `e`() SELECT 1; DROP DATABASE `x`"}),
    ("views", {"create": "CREATE VIEW `e` AS SELECT 1 /* ' */; DROP DATABASE `x` -- '"}),
])
def test_a_second_statement_after_an_object_s_body_is_refused(kind, obj):
    obj = {"schema": "db", "name": "tr" if kind == "triggers" else "e", **obj}
    with pytest.raises(IntegrityError, match="Nothing of it was run"):
        checked_create(kind, obj)


@pytest.mark.parametrize("grants", [
    ["GRANT ALL PRIVILEGES ON *.* TO `root`@`%` /* TO `reporter`@`127.0.0.1` */"],
    ["GRANT ALL PRIVILEGES ON *.* TO `reporter`@`127.0.0.1`, `root`@`%`"],
    ["GRANT SELECT ON `edge`.* TO `reporter`@`127.0.0.1` # '\n; DROP DATABASE x"],
])
def test_a_grant_reaches_its_own_account_alone(grants):
    g = {"user": "reporter", "host": "127.0.0.1", "create": "CREATE USER `reporter`@`127.0.0.1`", "grants": grants}
    with pytest.raises(IntegrityError, match="is not a GRANT to that account"):
        checked_grants(g)
    g2 = {**g, "create": "CREATE USER `reporter`@`127.0.0.1`, `root`@`%` IDENTIFIED BY 'x'", "grants": []}
    with pytest.raises(IntegrityError, match="is not that account's"):
        checked_grants(g2)
    ok = {**g, "grants": ["GRANT USAGE ON *.* TO `reporter`@`127.0.0.1` IDENTIFIED BY PASSWORD '*AB12'"]}
    assert checked_grants(ok)[0] == "CREATE USER IF NOT EXISTS `reporter`@`127.0.0.1`"


# --- what SHOW CREATE prints passes, read as the server reads it ---------------------------------------------------
SHOWN = [  # SHOW CREATE TABLE output of MariaDB 10.11 (the real-server test below runs each again)
    "CREATE TABLE `c1` (\n  `id` int(11) NOT NULL,\n  `t` text /*M!100301 COMPRESSED*/ DEFAULT NULL,\n"
    "  `j` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`j`)),\n"
    "  `ts` timestamp NULL DEFAULT '2020-01-01 00:00:00' COMMENT 'it''s a \\\\ backslash',\n  `e` varchar(5) DEFAULT concat('o\\'k','\\\\'),\n"
    "  PRIMARY KEY (`id`),\n  CONSTRAINT `ck` CHECK (`id` > 0 and `t` like 'a%')\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
    "COLLATE=utf8mb4_general_ci MIN_ROWS=2 PACK_KEYS=1 STATS_PERSISTENT=1 CHECKSUM=1 ROW_FORMAT=DYNAMIC COMMENT='tbl ''c'' \\\\ x' "
    "`PAGE_COMPRESSED`='1' `ENCRYPTED`='NO' /* `foo_opt`='1' */",
    "CREATE TABLE `ap` (\n  `id` int(11) NOT NULL,\n  `s` date NOT NULL,\n  `e` date NOT NULL,\n  PERIOD FOR `app` (`s`, `e`),\n"
    "  PRIMARY KEY (`id`,`app` WITHOUT OVERLAPS),\n  UNIQUE KEY `uk` (`id`,`s`) USING BTREE COMMENT 'idx c',\n"
    "  KEY `k2` (`e` DESC) IGNORED,\n  KEY `k3` (`s`) KEY_BLOCK_SIZE=8\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    "CREATE TABLE `v1` (\n  `id` int(11) NOT NULL,\n  `g` int(11) GENERATED ALWAYS AS (`id` * 2) VIRTUAL,\n"
    "  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4\n PARTITION BY HASH (`id`)\nPARTITIONS 2",
    "CREATE TABLE `p2` (\n  `id` int(11) NOT NULL,\n  `c` varchar(10) NOT NULL,\n  PRIMARY KEY (`id`,`c`)\n) ENGINE=InnoDB\n"
    " PARTITION BY LIST  COLUMNS(`c`)\n(PARTITION `a` VALUES IN ('x','y') COMMENT = 'first' ENGINE = InnoDB,\n"
    " PARTITION `b` DEFAULT ENGINE = InnoDB)",
    "CREATE TABLE `p1` (\n  `id` int(11) NOT NULL,\n  `d` date NOT NULL,\n  PRIMARY KEY (`id`,`d`)\n) ENGINE=InnoDB\n"
    " /*!50100 PARTITION BY RANGE (year(`d`))\n(PARTITION `p0` VALUES LESS THAN (2000) ENGINE = InnoDB,\n"
    " PARTITION `p1` VALUES LESS THAN MAXVALUE ENGINE = InnoDB) */",
    "CREATE TABLE `ft` (\n  `id` int(11) NOT NULL,\n  `t` text DEFAULT NULL,\n  `g` geometry NOT NULL,\n  PRIMARY KEY (`id`),\n"
    "  SPATIAL KEY `sg` (`g`),\n  FULLTEXT KEY `f` (`t`) COMMENT 'ft'\n) ENGINE=Aria DEFAULT CHARSET=utf8mb4 PAGE_CHECKSUM=1 TRANSACTIONAL=1",
    "CREATE TABLE `x1` (\n  `id` int(11) NOT NULL DEFAULT nextval(`db`.`s1`),\n  `bt` bit(3) DEFAULT b'101',\n"
    "  `b` int(11) GENERATED ALWAYS AS (cast(`bt` as signed)) STORED,\n  `w` int(11) INVISIBLE DEFAULT NULL COMMENT 'w*/x',\n"
    "  `lb` longblob DEFAULT NULL,\n  PRIMARY KEY (`id`),\n  UNIQUE KEY `ulb` (`lb`) USING HASH,\n  KEY `kc` (`lb`(10),`id` DESC) COMMENT 'multi',\n"
    "  CONSTRAINT `CONSTRAINT_1` CHECK (cast(`w` as char(3) charset utf8mb4) like 'x%' or `w` is null)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8",
]


@pytest.mark.parametrize("create", [*SHOWN, SHOWN[5].replace("COMMENT 'ft'", "WITH PARSER `ngram`")])
def test_what_show_create_table_prints_passes(create):
    name = create.split("`")[1]
    assert checked_create("tables", {"schema": "db", "name": name, "create": create}) == create
    kept, indexes, fks = split_deferred(create)
    assert not [d for d in indexes if d not in create] and "KEY `k" not in kept


def test_split_deferred_returns_one_line_definitions_and_a_create_that_is_whole():
    create = BASE.replace("  KEY `k` (`c`)\n", "  KEY `k` (`c`),\n  UNIQUE KEY `u``q` (`id`,\n    `c`) COMMENT 'a, b'\n")
    kept, indexes, fks = split_deferred(create)
    assert indexes == ["KEY `k` (`c`)", "UNIQUE KEY `u``q` (`id`, `c`) COMMENT 'a, b'"] and fks == []
    assert kept == BASE.replace(",\n  KEY `k` (`c`)\n", "\n")
    assert [definition_name(d) for d in indexes] == ["k", "u`q"]
    assert definition_name("CONSTRAINT `f``k` FOREIGN KEY (`a`) REFERENCES `p` (`id`)") == "f`k"


# --- DEFINER and event edits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, create, expected", [
    ("views", "CREATE ALGORITHM=UNDEFINED DEFINER=`x`@`h%` SQL SECURITY DEFINER VIEW `db`.`v` AS select 1 AS `a`",
     "CREATE ALGORITHM=UNDEFINED SQL SECURITY DEFINER VIEW `db`.`v` AS select 1 AS `a`"),
    ("views", "CREATE OR REPLACE DEFINER = CURRENT_USER() VIEW v AS SELECT 'DEFINER=`x`@`y`'",
     "CREATE OR REPLACE VIEW v AS SELECT 'DEFINER=`x`@`y`'"),
    ("triggers", "CREATE DEFINER=`we'ird``u`@`%` TRIGGER tr AFTER INSERT ON t FOR EACH ROW SET @a = 1",
     "CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW SET @a = 1"),
    ("routines", "CREATE DEFINER='o''brien'@'10.0.%' PROCEDURE `p`()\nBEGIN\n  SELECT 1;\nEND",
     "CREATE PROCEDURE `p`()\nBEGIN\n  SELECT 1;\nEND"),
    ("routines", 'CREATE DEFINER="lastline"@"127.0.0.1" FUNCTION "greet"(who VARCHAR(20)) RETURNS varchar(40) RETURN who',
     'CREATE FUNCTION "greet"(who VARCHAR(20)) RETURNS varchar(40) RETURN who'),
    ("routines", "CREATE DEFINER=root@localhost AGGREGATE FUNCTION f(x INT) RETURNS INT RETURN 1",
     "CREATE AGGREGATE FUNCTION f(x INT) RETURNS INT RETURN 1"),
    ("events", "CREATE DEFINER=CURRENT_USER EVENT `e` ON SCHEDULE EVERY 1 DAY DO SELECT 1",
     "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO SELECT 1"),
    ("events", "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO SELECT 1", "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO SELECT 1"),
    ("tables", BASE, BASE),
])
def test_without_definer_removes_the_header_s_definer_only(kind, create, expected):
    assert without_definer(kind, create) == expected
    if kind != "tables":
        assert with_definer(kind, create, "own`er@localhost").replace("DEFINER=`own``er`@`localhost` ", "") == expected


@pytest.mark.parametrize("kind, create", [
    ("triggers", "CREATE DEFINER=`x`@ TRIGGER t AFTER INSERT ON t FOR EACH ROW SET @a = 1"),
    ("triggers", "CREATE /*!50017 DEFINER=`x`@`y` */ TRIGGER t AFTER INSERT ON t FOR EACH ROW SET @a = 1"),
    ("views", "CREATE DEFINER='a\\'b'@'h' VIEW v AS SELECT 1"),  # a backslash the sql_mode decides about
    ("events", "DROP EVENT e"),
])
def test_a_definer_that_cannot_be_placed_exactly_is_refused(kind, create):
    with pytest.raises(IntegrityError):
        without_definer(kind, create)


@pytest.mark.parametrize("create, expected", [
    ("CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' ON COMPLETION NOT PRESERVE ENABLE DO DELETE FROM t",
     "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' ON COMPLETION NOT PRESERVE DISABLE DO DELETE FROM t"),
    ("CREATE EVENT `e` ON SCHEDULE AT '2030-01-01' ON COMPLETION PRESERVE DISABLE ON SLAVE COMMENT 'ENABLE' DO BEGIN DELETE FROM t; END",
     "CREATE EVENT `e` ON SCHEDULE AT '2030-01-01' ON COMPLETION PRESERVE DISABLE COMMENT 'ENABLE' DO BEGIN DELETE FROM t; END"),
    ("CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY COMMENT 'c' DO SELECT 'ENABLE'",
     "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DISABLE COMMENT 'c' DO SELECT 'ENABLE'"),
    ("CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DO ALTER EVENT `e` ENABLE", "CREATE EVENT `e` ON SCHEDULE EVERY 1 DAY DISABLE DO ALTER EVENT `e` ENABLE"),
    ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DISABLE ON REPLICA DO SELECT 1", "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1"),
])
def test_events_come_back_disabled(create, expected):
    assert disabled_event(create) == expected
    with pytest.raises(IntegrityError):
        disabled_event(create.replace("ON SCHEDULE", "ON SCHEDULE /*!99999 ENABLE */"))


# --- a real backup, checked and rebuilt on a real server ----------------------------------------------------------
@pytest.fixture(scope="module")
def backup_schema(logical_source, tmp_path_factory) -> dict:
    from lastline.logical.backup import stages as logical_backup

    dest = tmp_path_factory.mktemp("sql_text")
    logical_backup.dump(logical_backup.preflight({"source_conn_id": "t_lsource", "destination": f"file://{dest}", "databases": ["store", "edge"]}))
    (folder,) = [p for p in dest.iterdir() if p.is_dir()]
    return json.loads((folder / "schema.json").read_text())


@pytest.fixture(scope="module")
def scratch(sandbox_root):
    from conftest import _instance

    inst = _instance(sandbox_root, "sqltext")
    yield inst.server()
    inst.destroy()


def _definitions_of(server, db: str, name: str) -> list[str]:
    create = server.query(f"SHOW CREATE TABLE `{db}`.`{name.replace('`', '``')}`")[0][1]
    return sorted(line.strip().rstrip(",") for line in create.split("\n")[1:] if line.startswith("  "))


@pytest.mark.e2e
def test_a_real_backup_passes_and_its_rewritten_statements_run_on_a_real_server(backup_schema, logical_source, scratch):
    from lastline.core.sql import qualified, quote_ident
    from lastline.logical.format.dialect import LOAD_SESSION

    schema, dbs = backup_schema, ["store", "edge"]
    validate_schema(schema, dbs)
    with scratch.session() as cur:
        cur.execute(LOAD_SESSION)
        for d in schema["databases"]:
            cur.execute(database_create(d))
        for t in schema["tables"]:  # the tables without their held-back keys, then the keys, then the foreign keys
            cur.execute(f"USE {quote_ident(t['schema'])}")
            cur.execute(split_deferred(checked_create("tables", t, dbs))[0])
        for part in (1, 2):
            for t in schema["tables"]:
                for d in split_deferred(t["create"])[part]:
                    cur.execute(f"ALTER TABLE {qualified(t['schema'], t['name'])} ADD {d}")
        for s in schema["sequences"]:
            cur.execute(f"USE {quote_ident(s['schema'])}")
            cur.execute(checked_create("sequences", s))
    src = logical_source.server()
    for t in schema["tables"]:
        assert _definitions_of(scratch, t["schema"], t["name"]) == _definitions_of(src, t["schema"], t["name"]), t["name"]
    seen = []
    for kind in ("triggers", "views", "routines", "events"):
        for obj in schema[kind]:
            create = without_definer(kind, checked_create(kind, obj, dbs))
            create = disabled_event(create) if kind == "events" else create
            with scratch.session(charset=obj.get("character_set_client") or "utf8mb4") as cur:
                cur.execute(f"USE {quote_ident(obj['schema'])}")
                cur.execute("SET SESSION collation_connection = %s", (obj.get("collation_connection") or "utf8mb4_general_ci",))
                cur.execute("SET SESSION sql_mode = %s", (obj.get("sql_mode", ""),))
                cur.execute(create)
            seen.append((kind, obj["name"]))
    assert len(seen) == sum(len(schema[k]) for k in ("triggers", "views", "routines", "events")) > 20
    me = scratch.query("SELECT CURRENT_USER()")[0][0]
    definers = scratch.query(
        "SELECT DEFINER FROM information_schema.VIEWS WHERE TABLE_SCHEMA IN ('store', 'edge') UNION ALL "
        "SELECT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ('store', 'edge') UNION ALL "
        "SELECT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN ('store', 'edge') UNION ALL "
        "SELECT DEFINER FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN ('store', 'edge')")
    assert {d for (d,) in definers} == {me} and len(definers) == len(seen)
    assert {s for (s,) in scratch.query("SELECT STATUS FROM information_schema.EVENTS")} == {"DISABLED"}
    # another definer, named by the deployment, is accepted by the server as the statement's own
    view = next(v for v in schema["views"] if v["name"] == "actor_info")
    with scratch.session() as cur:
        cur.execute(with_definer("views", view["create"].replace("CREATE ", "CREATE OR REPLACE ", 1), me))
    assert scratch.query("SELECT SECURITY_TYPE FROM information_schema.VIEWS WHERE TABLE_NAME = 'actor_info'") == [("INVOKER",)]
    # SHOW CREATE TABLE forms the corpus lacks (executable comments in kept columns, partitions, periods,
    # engine-defined options): split, run, their keys added back, and the server prints the same definitions
    with scratch.session() as cur:
        cur.execute(LOAD_SESSION)
        cur.execute("CREATE DATABASE db")
        cur.execute("CREATE SEQUENCE db.s1")
        cur.execute("USE db")
        for create in SHOWN:
            name = create.split("`")[1]
            kept, indexes, fks = split_deferred(checked_create("tables", {"schema": "db", "name": name, "create": create}))
            cur.execute(kept)
            for d in indexes + fks:
                cur.execute(f"ALTER TABLE {quote_ident(name)} ADD {d}")
            shown = scratch.query(f"SHOW CREATE TABLE db.{quote_ident(name)}")[0][1]
            lines = lambda text: sorted(x.strip().rstrip(",") for x in text.split("\n") if x.startswith("  "))  # noqa: E731
            assert lines(shown) == lines(create), name


def test_an_object_s_sql_mode_is_a_list_of_mode_names():
    """The review's: a number (1048576, NO_BACKSLASH_ESCAPES as a bitmask) made the server read as code what the
    checks read as a string."""
    trigger = {"schema": "d", "name": "tr", "table": "t", "create": "CREATE TRIGGER `tr` BEFORE INSERT ON `t` FOR EACH ROW "
               "SET NEW.v = 'a\\' , NEW.w = (SELECT 1) -- '", "character_set_client": "utf8mb4"}
    for bad in (1048576, "NO_BACKSLASH_ESCAPES,1", "SHOUTING"):
        with pytest.raises(IntegrityError, match="is not a list of sql_mode names"):
            checked_create("triggers", {**trigger, "sql_mode": bad})
    assert checked_create("triggers", {**trigger, "sql_mode": "STRICT_TRANS_TABLES,no_engine_substitution"})


def test_a_system_versioned_table_is_refused():
    """History the mask's UPDATE would keep (the review's), and that no backup of lastline's carries (its
    backup refuses such tables)."""
    create = ("CREATE TABLE `v1` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
              "WITH SYSTEM VERSIONING")
    with pytest.raises(IntegrityError, match="keeps row history"):
        checked_create("tables", {"schema": "db", "name": "v1", "create": create})

