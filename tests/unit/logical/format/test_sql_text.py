"""logical.format.sql_text: SQL text read as the server's lexer reads it. Comments end where the server ends them,
executable comments are code, strings and names unquote as the server does, text the server could read otherwise is
refused; numbers, modes, the helpers on a token list and the one-statement check of a stored program's body."""
from __future__ import annotations

import pytest

from lastline.logical.format.sql_text import (
    COMMENT,
    EXEC_CLOSE,
    EXEC_OPEN,
    IDENT,
    NUMBER,
    OP,
    SPACE,
    STRING,
    WORD,
    SqlTextError,
    check_body,
    ident_value,
    matching_paren,
    mode_options,
    significant,
    split_top_level,
    string_value,
    tokenize,
    tokenize_any_mode,
    word_at,
    words_at,
)


def kinds(text: str, **mode) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(text, **mode) if t.kind != SPACE]


# --- the tokenizer -----------------------------------------------------------------------------------
def test_comments_end_where_the_server_ends_them():
    assert kinds("a /* ' */ SELECT /* ` */ b") == [
        (WORD, "a"), (COMMENT, "/* ' */"), (WORD, "SELECT"), (COMMENT, "/* ` */"), (WORD, "b")]
    assert kinds("a /* /* not nested */ b */") == [(WORD, "a"), (COMMENT, "/* /* not nested */"), (WORD, "b"),
                                                    (OP, "*"), (OP, "/")]
    assert kinds("a # it's a comment\nSELECT") == [(WORD, "a"), (COMMENT, "# it's a comment"), (WORD, "SELECT")]
    # `-- ` needs a space or a control character (or the end); `--x` is minus minus x
    assert kinds("a --x") == [(WORD, "a"), (OP, "-"), (OP, "-"), (WORD, "x")]
    assert kinds("a -- x\nb --\tc\nd --\x01e\nf --") == [
        (WORD, "a"), (COMMENT, "-- x"), (WORD, "b"), (COMMENT, "--\tc"), (WORD, "d"), (COMMENT, "--\x01e"), (WORD, "f"),
        (COMMENT, "--")]
    assert kinds("1--1") == [("number", "1"), (OP, "-"), (OP, "-"), ("number", "1")]


def test_executable_comments_are_code():
    toks = tokenize("x /*!50000 SELECT 1 */ y /*M!100301 COMPRESSED*/ /*!NOW()*/ /*M! z */")
    assert [(t.kind, t.text) for t in significant(toks)] == [
        (WORD, "x"), (WORD, "SELECT"), ("number", "1"), (WORD, "y"), (WORD, "COMPRESSED"), (WORD, "NOW"), (OP, "("),
        (OP, ")"), (WORD, "z")]
    assert [t.text for t in toks if t.kind == EXEC_OPEN] == ["/*!50000", "/*M!100301", "/*!", "/*M!"]
    assert [t.in_exec for t in significant(toks)] == [False, True, True, False, True, True, True, True, True]
    assert sum(t.kind == EXEC_CLOSE for t in toks) == 4
    # an executable comment ends at its first */: a string, an identifier or a line comment may not run past it
    for text in ("/*!50000 '*/' */", "/*!50000 `*/` */", "/*!50000 # x */\n*/", "/*! a /* b */ c */", "/*!50000 a"):
        with pytest.raises(SqlTextError):
            tokenize(text)


def test_strings_and_names_unquote_as_the_server_does():
    toks = significant(tokenize(r"'it''s \'q\' \\' `b``q` `a.b c%d` " + '"d""q"' + " N'n' X'0A' b'01' _utf8mb4'x' 0x1F 1e5 1abc"))
    assert [t.kind for t in toks] == [STRING, IDENT, IDENT, STRING, STRING, STRING, STRING, WORD, STRING, "number",
                                      "number", WORD]
    assert string_value(toks[0]) == "it's 'q' \\"
    assert [ident_value(t) for t in toks[1:3]] == ["b`q", "a.b c%d"]
    assert string_value(toks[3]) == 'd"q'
    ansi = significant(tokenize('"d""q" "x\\"', ansi_quotes=True))  # ANSI_QUOTES: names, no backslash escapes
    assert [(t.kind, ident_value(t)) for t in ansi] == [(IDENT, 'd"q'), (IDENT, "x\\")]
    nbe = significant(tokenize(r"'a\' 'b'", backslash_escapes=False))  # NO_BACKSLASH_ESCAPES: the \ is a letter
    assert [t.text for t in nbe] == ["'a\\'", "'b'"]
    assert [ident_value(t) for t in significant(tokenize("[a]]b] c", mssql_brackets=True))] == ["a]b", "c"]


def test_hosts_and_variables_after_an_at_sign_are_names():
    toks = significant(tokenize("DEFINER=`x`@`h%` u@localhost 'a'@'%' @v @@global.x"))
    assert [(t.kind, t.text) for t in toks] == [
        (WORD, "DEFINER"), (OP, "="), (IDENT, "`x`"), (OP, "@"), (IDENT, "`h%`"), (WORD, "u"), (OP, "@"),
        ("at_name", "localhost"), (STRING, "'a'"), (OP, "@"), (STRING, "'%'"), (OP, "@"), ("at_name", "v"), (OP, "@"),
        (OP, "@"), ("at_name", "global.x")]


@pytest.mark.parametrize("text", [
    "'unterminated", "`unterminated", '"unterminated', "/* unterminated", "/*! unterminated", "X'0G'", "X'ABC'",
    "'a\\é'",  # a backslash before a non-ASCII character: the server reads it byte by byte
    "a --é", "a\u00a0b", "a\x00b", "a\udc27b", "a\x01b",
])
def test_what_the_server_could_read_otherwise_is_refused(text):
    with pytest.raises(SqlTextError):
        tokenize(text)


def test_any_mode_reading_refuses_text_that_sql_mode_changes():
    assert len(tokenize_any_mode("CREATE TABLE `t` (`a` int COMMENT 'it''s')")) > 5
    for text in ("CREATE TABLE `t` (`a` int COMMENT 'a\\' SELECT 1 -- ')", 'SELECT "x"', "SELECT [x]"):
        with pytest.raises(SqlTextError):
            tokenize_any_mode(text)


def test_helpers_read_keywords_parentheses_and_lists():
    sig = significant(tokenize("f(a, (b, c), 'x,y') t.select select.x"))
    close = matching_paren(sig, 1)
    assert sig[close].end == sig[-7].end and [(a, b) for a, b in split_top_level(sig, 2, close)] == [(2, 3), (4, 9), (10, 11)]
    assert word_at(sig, 0) == "F" and word_at(sig, len(sig) - 4) == "" and word_at(sig, len(sig) - 3) == ""


@pytest.mark.parametrize("body, ok", [
    ("BEGIN SELECT 1; END", True), ("IF NEW.v < 0 THEN SET NEW.v = 0; END IF", True),
    ("l1: LOOP LEAVE l1; END LOOP l1", True), ("BEGIN CASE x WHEN 1 THEN SELECT 1; END CASE; END", True),
    ("RETURN CASE WHEN a THEN CASE WHEN b THEN 1 END END + 1", True),
    ("BEGIN DECLARE EXIT HANDLER FOR SQLSTATE '45000', NOT FOUND BEGIN ROLLBACK; END; SET x = IF(a, 1, 2); END", True),
    ("BEGIN FOR i IN 1..3 DO SELECT i; END FOR; WHILE a DO SET a = 0; END WHILE; REPEAT SET a = 1; UNTIL a END REPEAT; END", True),
    ("BEGIN SELECT 1; END; DROP DATABASE x", False), ("DELETE FROM t; DROP DATABASE x", False),
    ("BEGIN SELECT 1; END x y", False), ("BEGIN SELECT 1;", False), ("SELECT 1;", False), ("END IF", False),
])
def test_a_body_is_one_statement(body, ok):
    if ok:
        check_body(significant(tokenize(body)), 0)
    else:
        with pytest.raises(SqlTextError):
            check_body(significant(tokenize(body)), 0)


@pytest.mark.parametrize(("sql_mode", "options"), [
    (None, (False, True, False)), ("", (False, True, False)), ("STRICT_TRANS_TABLES", (False, True, False)),
    ("ANSI_QUOTES", (True, True, False)), ("ansi", (True, True, False)), ("NO_BACKSLASH_ESCAPES", (False, False, False)),
    ("MSSQL", (True, True, True)), ("ORACLE,NO_BACKSLASH_ESCAPES", (True, False, False)),
    (" postgresql , no_backslash_escapes ", (True, False, False)),
], ids=["none", "empty", "unrelated-mode", "ansi-quotes", "ansi-lower-case", "no-backslash-escapes", "mssql-brackets",
        "oracle-and-escapes-off", "spaces-and-case"])
def test_mode_options(sql_mode, options):
    got = mode_options(sql_mode)
    assert (got["ansi_quotes"], got["backslash_escapes"], got["mssql_brackets"]) == options


@pytest.mark.parametrize(("text", "tokens"), [
    ("0x1F", [(NUMBER, "0x1F")]), ("0b101", [(NUMBER, "0b101")]), ("0xZZ", [(WORD, "0xZZ")]), ("0b102", [(WORD, "0b102")]),
    ("1.5e-3", [(NUMBER, "1.5e-3")]), ("1e+5", [(NUMBER, "1e+5")]), ("1e", [(WORD, "1e")]), ("1abc", [(WORD, "1abc")]),
    (".5", [(NUMBER, ".5")]),
    ("t.1e5", [(WORD, "t"), (OP, "."), (NUMBER, "1e5")]), ("é1", [(WORD, "é1")]),
], ids=["hex", "binary", "bad-hex-is-a-name", "bad-binary-is-a-name", "fraction-exponent", "signed-exponent",
        "exponent-without-digits", "digits-then-letters", "leading-dot", "after-a-dot", "non-ascii-letter"])
def test_numbers_and_names_that_start_like_numbers(text, tokens):
    assert kinds(text) == tokens


@pytest.mark.parametrize("text", [
    "", "SELECT 1", "a /* c */ b -- d\n e # f", "'" + "\\'" * 2000 + "'", "`a``b`.`c d`.`e.f`",
    "/*!50000 x */ /*M!100301 y */", " \t\n\r\x0b\x0c",
], ids=["empty", "one-statement", "every-comment", "many-escapes", "names-with-backticks-dots-spaces",
        "executable-comments", "every-white-space"])
def test_every_character_is_in_exactly_one_token(text):
    toks = tokenize(text)
    assert "".join(t.text for t in toks) == text
    assert all(a.end == b.pos for a, b in zip(toks, toks[1:]))


@pytest.mark.parametrize(("text", "value"), [
    (r"'a\nb'", "a\nb"), (r"'\n\t\r\b\0\Z'", "\n\t\r\b\0\x1a"), (r"'\%\_'", r"\%\_"), (r"'\q'", "q"), ("''''", "'"),
    ("''", ""), ("'" + "\\\\" * 5000 + "'", "\\" * 5000), ("x'0A'", None), ("`a`", None),
], ids=["newline-escape", "every-named-escape", "like-wildcards-keep-their-backslash", "unknown-escape-is-the-letter",
        "doubled-quote", "empty", "many-escapes", "hex-literal-is-no-plain-string", "a-name-is-no-string"])
def test_string_value(text, value):
    assert string_value(tokenize(text)[0]) == value


def test_string_value_without_backslash_escapes():
    tok = tokenize(r"'a\nb'", backslash_escapes=False)[0]
    assert string_value(tok, backslash_escapes=False) == r"a\nb"


@pytest.mark.parametrize(("text", "i", "words", "ok"), [
    ("END IF", 0, ("END", "IF"), True), ("end  if", 0, ("END", "IF"), True), ("END x", 0, ("END", "IF"), False),
    ("t.END IF", 2, ("END", "IF"), False), ("END", 0, ("END", "IF"), False),
], ids=["in-order", "any-case-any-space", "other-word", "a-name-after-a-dot", "past-the-end"])
def test_words_at(text, i, words, ok):
    assert words_at(significant(tokenize(text)), i, *words) is ok


def test_an_unbalanced_parenthesis_is_refused():
    with pytest.raises(SqlTextError, match="unbalanced"):
        matching_paren(significant(tokenize("f(a, (b)")), 1)


def test_the_tokenizers_patterns_read_every_code_point_as_its_loops_did():
    """The word run and the refused characters are patterns (the hot path of checking 10,000 tables): each agrees
    with the per-character test it stands for on every code point, surrogates included."""
    from lastline.logical.format import sql_text

    for cp in range(0x110000):
        c = chr(cp)
        assert (sql_text._WORD_RUN.match(c).end() == 1) == sql_text._word_char(c), hex(cp)
        assert bool(sql_text._REFUSED_CHARS.search(c)) == (c == "\x00" or "\ud800" <= c <= "\udfff"), hex(cp)
