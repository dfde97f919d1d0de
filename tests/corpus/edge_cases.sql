-- lastline's edge-case corpus: one table (or object) per corner a logical dump must keep exactly.
-- Loaded by tests/conftest.py into the logical source; every table is checked by checksum.
SET SESSION sql_mode = '';
SET NAMES utf8mb4;
DROP DATABASE IF EXISTS edge;
CREATE DATABASE edge CHARACTER SET latin1 COLLATE latin1_swedish_ci;
USE edge;

-- NULL vs 'NULL' vs '\N' vs '' (and friends)
CREATE TABLE null_like (id INT PRIMARY KEY, v VARCHAR(20) NULL, t TEXT NULL) CHARSET utf8mb4;
INSERT INTO null_like VALUES (1, NULL, NULL), (2, 'NULL', 'null'), (3, '\\N', '\\n'), (4, '', ''),
  (5, 'N', '\\'), (6, ' ', '\\\\N'), (7, '\\', NULL);

-- separators, quotes, CR/LF, backslashes, NUL inside values
CREATE TABLE special_chars (id INT PRIMARY KEY, v TEXT) CHARSET utf8mb4;
INSERT INTO special_chars VALUES (1, 'tab\there'), (2, 'comma,here'), (3, 'double"quote'), (4, 'single''quote'),
  (5, 'back`tick'), (6, 'line\nfeed'), (7, 'carriage\rreturn'), (8, 'crlf\r\nend'), (9, 'back\\slash'),
  (10, 'trailing\\'), (11, CONCAT('nul', CHAR(0), 'byte')), (12, '\t\n\r\\\0'), (13, '\\t literal'), (14, '\n');

-- binary types, byte-exact: every byte value, padding, BIT
CREATE TABLE binaries (id INT PRIMARY KEY, bl LONGBLOB, bi BINARY(8), vb VARBINARY(300), b1 BIT(1), b64 BIT(64), b10 BIT(10));
INSERT INTO binaries VALUES (1, NULL, NULL, NULL, NULL, NULL, NULL), (2, '', x'00', '', b'0', b'0', b'0'),
  (3, x'00090A0D5C4E', x'5C4E', x'0A', b'1', x'FFFFFFFFFFFFFFFF', b'1111111111'),
  (4, REPEAT(x'FF00', 40000), x'0102030405060708', x'80', b'1', x'8000000000000001', b'1000000001');
INSERT INTO binaries (id, vb) SELECT 5, CAST(GROUP_CONCAT(CHAR(seq) SEPARATOR '') AS BINARY) FROM seq_0_to_255;
UPDATE binaries SET bl = vb WHERE id = 5;

-- spatial values with SRIDs
CREATE TABLE geo (id INT PRIMARY KEY, g GEOMETRY NULL, p POINT NULL, poly POLYGON NULL);
INSERT INTO geo VALUES (1, ST_GeomFromText('POINT(1.5 -2.25)', 4326), ST_PointFromText('POINT(0 0)'),
    ST_PolygonFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(2 2,3 2,3 3,2 2))')),
  (2, ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1,2 3))'), NULL, NULL),
  (3, NULL, ST_PointFromText('POINT(1e300 -1e-300)', 3857), NULL);

-- character sets: the table says latin1, columns say otherwise; sjis/gbk have 0x5C as a second byte
CREATE TABLE charsets (id INT PRIMARY KEY, l1 VARCHAR(20) CHARACTER SET latin1, u8 VARCHAR(20) CHARACTER SET utf8mb4,
  u3 VARCHAR(20) CHARACTER SET utf8mb3, u16 VARCHAR(20) CHARACTER SET utf16, sj VARCHAR(20) CHARACTER SET sjis,
  gb VARCHAR(20) CHARACTER SET gbk, bn VARCHAR(20) CHARACTER SET binary, el VARCHAR(20) CHARACTER SET greek) CHARSET latin1;
INSERT INTO charsets VALUES (1, _latin1 x'E9E8FF', _utf8mb4 x'F09F9880E282AC', _utf8mb3 x'E282AC', _utf16 x'D83DDE00',
  _sjis x'955C8EA6', _gbk x'905C', x'00FF5C', _greek x'E1E2E3'),
  (2, 'plain', 'ascii\ttab', '', '', '', '', '', ''), (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);

-- JSON and text of every size
CREATE TABLE json_docs (id INT PRIMARY KEY, doc JSON NULL, big LONGTEXT);
INSERT INTO json_docs VALUES (1, '{"a": [1, 2.5, null, true], "s": "tab\\tnew\\nline \\u00e9", "q": "\\"x\\""}', REPEAT('x', 100000)),
  (2, 'null', ''), (3, NULL, NULL), (4, '[]', '{}');

-- numbers to full precision
CREATE TABLE numbers (id INT PRIMARY KEY, d DECIMAL(65,30), f FLOAT, db DOUBLE, tu TINYINT UNSIGNED, bu BIGINT UNSIGNED,
  bs BIGINT, fz FLOAT(7,3), dz DOUBLE(20,10));
INSERT INTO numbers VALUES (1, '12345678901234567890123456789012345.123456789012345678901234567890', 3.1415927, 0.1e0 + 0.2e0,
    255, 18446744073709551615, -9223372036854775808, 1234.567, 1234567890.0123456789),
  (2, '-0.000000000000000000000000000001', 3.4028235e38, 1.7976931348623157e308, 0, 0, 9223372036854775807, -0.001, -0.0000000001),
  (3, 0, 1.17549435e-38, 5e-324, 1, 1, 0, 0, 0), (4, NULL, -0.0, -2.2250738585072014e-308, NULL, NULL, NULL, NULL, NULL),
  (5, 1, 16777217, 9007199254740993, 2, 2, 2, 2, 2);

-- temporal types with fractional seconds, extremes, zero dates (sql_mode '' allows them)
CREATE TABLE temporal (id INT PRIMARY KEY, d DATE NULL, dt DATETIME(6) NULL, ts TIMESTAMP(6) NULL DEFAULT NULL,
  t TIME(6) NULL, y YEAR NULL, dt0 DATETIME NULL);
INSERT INTO temporal VALUES (1, '1000-01-01', '1000-01-01 00:00:00.000000', '1970-01-01 00:00:01.000000', '-838:59:59.000000', 1901, '9999-12-31 23:59:59'),
  (2, '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '838:59:59.000000', 2155, NULL),
  (3, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '00:00:00.000001', 0, '0000-00-00 00:00:00'),
  (4, '2020-00-15', '2020-02-00 12:00:00.5', NULL, NULL, NULL, '2024-02-29 12:34:56'),
  (5, NULL, NULL, NULL, NULL, NULL, NULL);

-- invisible columns are dumped; generated columns are recomputed by the server
CREATE TABLE invisible_generated (id INT PRIMARY KEY, a INT, secret VARCHAR(10) INVISIBLE DEFAULT 'hidden',
  v INT AS (a * 2) VIRTUAL, s VARCHAR(30) AS (CONCAT('s-', a)) STORED, INDEX (s));
INSERT INTO invisible_generated (id, a, secret) VALUES (1, 1, 'one'), (2, NULL, NULL), (3, 3, DEFAULT);

-- enums and sets (with the empty set)
CREATE TABLE enums_sets (id INT PRIMARY KEY, e ENUM('a', 'b c', 'd\'e', '') NULL, s SET('x', 'y', 'z') NULL);
INSERT INTO enums_sets VALUES (1, 'a', 'x,z'), (2, 'b c', ''), (3, 'd''e', 'x,y,z'), (4, '', NULL), (5, NULL, 'y');

-- the AUTO_INCREMENT counter beyond the highest id is kept
CREATE TABLE counters (id INT AUTO_INCREMENT PRIMARY KEY, v INT) AUTO_INCREMENT = 1000;
SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO';
INSERT INTO counters (id, v) VALUES (0, 0), (1, 1), (5, 5);
SET SESSION sql_mode = '';
ALTER TABLE counters AUTO_INCREMENT = 1000;

-- keys of every shape: string, composite, temporal, binary, enum (not usable), unique not-null, none
CREATE TABLE key_string (k VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, n INT);
INSERT INTO key_string SELECT CONCAT(CASE seq % 4 WHEN 0 THEN 'Ä' WHEN 1 THEN 'a' WHEN 2 THEN 'Z' ELSE 'é' END, LPAD(seq, 6, '0'), REPEAT(' ', seq % 3)), seq
  FROM seq_1_to_3000;
CREATE TABLE key_composite (a INT, b VARCHAR(10), c DATE, v INT, PRIMARY KEY (a, b, c));
INSERT INTO key_composite SELECT seq % 7, CHAR(65 + seq % 26), '2020-01-01' + INTERVAL seq DAY, seq FROM seq_1_to_2500;
CREATE TABLE key_datetime (k DATETIME(6) PRIMARY KEY, v INT);
INSERT INTO key_datetime SELECT '2020-01-01' + INTERVAL seq SECOND + INTERVAL seq MICROSECOND, seq FROM seq_1_to_2500;
CREATE TABLE key_binary (k BINARY(16) PRIMARY KEY, v INT);
INSERT INTO key_binary SELECT UNHEX(MD5(seq)), seq FROM seq_1_to_2500;
CREATE TABLE key_enum (k ENUM('b', 'a', 'c') PRIMARY KEY, v INT);
INSERT INTO key_enum VALUES ('a', 1), ('b', 2), ('c', 3);
CREATE TABLE unique_notnull (u BIGINT NOT NULL, n INT NULL, v VARCHAR(10), UNIQUE KEY un (n), UNIQUE KEY uu (u));
INSERT INTO unique_notnull SELECT seq * 3, IF(seq % 2, NULL, seq), 'x' FROM seq_1_to_2500;
CREATE TABLE no_key (a INT, b VARCHAR(10));
INSERT INTO no_key SELECT seq % 10, 'dup' FROM seq_1_to_2500;
INSERT INTO no_key VALUES (NULL, NULL), (NULL, NULL);

-- non-transactional engines
CREATE TABLE myisam_t (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE = MyISAM;
INSERT INTO myisam_t VALUES (1, 'm'), (2, NULL);
CREATE TABLE aria_t (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE = Aria;
INSERT INTO aria_t VALUES (1, 'a');
CREATE TABLE empty_t (id INT PRIMARY KEY);

-- identifiers that need quoting everywhere
CREATE TABLE `we!rd tab``le/x` (`col with space` INT PRIMARY KEY, `select` VARCHAR(5), `ünï` INT);
INSERT INTO `we!rd tab``le/x` VALUES (1, 'from', 2);
-- names a format string takes for its own (%s, %d, %%: MySQLdb %-formats a statement run with args),
-- with a quote, a double quote, a backquote, a dot, a space and non-ASCII; an index to rebuild, a MyISAM twin
CREATE TABLE `pct%s %d%%'"``.é` (`c%s'"``.%d` INT PRIMARY KEY, `v%%` VARCHAR(10), `ü %s` INT, KEY `k%s` (`ü %s`));
INSERT INTO `pct%s %d%%'"``.é` VALUES (1, '%s', 2), (2, '%%d', NULL), (3, NULL, 3);
CREATE TABLE `pct%s myisam'` (`c%d` INT PRIMARY KEY, `v%s` VARCHAR(10)) ENGINE = MyISAM;
INSERT INTO `pct%s myisam'` VALUES (1, '%s'), (2, '100%');

-- sequences with their state
CREATE SEQUENCE seq_orders START WITH 100 INCREMENT BY 5 CACHE 10;
SELECT NEXTVAL(seq_orders), NEXTVAL(seq_orders);
CREATE SEQUENCE seq_plain NOCACHE;
SELECT NEXTVAL(seq_plain);

-- views on views, named so that name order is the wrong order
CREATE VIEW z_base AS SELECT id, v FROM special_chars WHERE id < 10;
CREATE VIEW m_middle AS SELECT id FROM z_base;
CREATE VIEW a_top AS SELECT COUNT(*) AS n FROM m_middle;

-- triggers, routines and events keep their bodies and sql_mode byte for byte
CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(40), at_id INT);
DELIMITER ;;
CREATE TRIGGER counters_ai AFTER INSERT ON counters FOR EACH ROW
BEGIN
  -- a comment, 'quotes', "double", and a tab:	here
  INSERT INTO audit (what, at_id) VALUES ('counters insert', NEW.id);
END;;
CREATE TRIGGER counters_ai2 AFTER INSERT ON counters FOR EACH ROW FOLLOWS counters_ai
  INSERT INTO audit (what, at_id) VALUES ('second', NEW.id);;
SET SESSION sql_mode = 'ANSI_QUOTES,PIPES_AS_CONCAT';;
CREATE FUNCTION greet(who VARCHAR(20)) RETURNS VARCHAR(40) DETERMINISTIC
  RETURN 'hello ' || who;;
SET SESSION sql_mode = '';;
CREATE PROCEDURE count_audit(OUT n INT)
BEGIN
  /* block comment ;; with a fake delimiter */
  SELECT COUNT(*) INTO n FROM audit;
END;;
CREATE EVENT purge_audit ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 00:00:00' DISABLE
  DO DELETE FROM audit WHERE id < 0;;
DELIMITER ;
INSERT INTO audit (what, at_id) VALUES ('seed', 0);
