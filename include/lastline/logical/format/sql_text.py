"""SQL text as the MariaDB server's lexer reads it: tokens (kind, text, position) and the helpers the schema
checks need. It follows sql/sql_lex.cc closely enough that no text can be a comment or string here and code
to the server, or the reverse: `/* */` comments do not nest; an executable comment (`/*!`, `/*!NNNNN`,
`/*M!`, `/*M!NNNNNN`) is code, so its content is tokenized as code (and must end at the first `*/`);
`#` and `-- ` (two dashes and a space or control character) run to the end of the line, `--x` is two
minus signs; strings take backslash escapes (unless NO_BACKSLASH_ESCAPES) and doubled quotes. What the
server would read differently from one connection character set to another (a backslash before a non-ASCII
character, a non-alphanumeric non-ASCII character in code, NUL, unpaired surrogates) is refused, as is an
unterminated string, identifier or comment. Over 300 lines: one lexer and the statement-shape helpers
built on it, kept whole so that it can be read side by side with the server's.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

SPACE, COMMENT, EXEC_OPEN, EXEC_CLOSE = "space", "comment", "exec_open", "exec_close"
WORD, IDENT, STRING, NUMBER, AT_NAME, OP = "word", "ident", "string", "number", "at_name", "op"
_WHITE = " \t\n\r\x0b\x0c"
_HOST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._$")
_ANSI_MODES = {"ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL"}


class SqlTextError(ValueError):
    """Text the checker cannot read exactly as the server would (or that the server would refuse)."""

    def __init__(self, problem: str, pos: int) -> None:
        super().__init__(f"{problem} (at character {pos})")
        self.problem, self.pos = problem, pos


@dataclass(frozen=True)
class Token:
    """One token: its kind (SPACE, COMMENT, EXEC_OPEN, EXEC_CLOSE, WORD, IDENT, STRING, NUMBER, AT_NAME,
    OP), its text as written, where it starts, and whether it is inside an executable comment."""

    kind: str
    text: str
    pos: int
    in_exec: bool = False

    @property
    def end(self) -> int:
        return self.pos + len(self.text)


def mode_options(sql_mode: str | None) -> dict[str, bool]:
    """The tokenizer's options for a session sql_mode (as SHOW CREATE prints it: comma-separated)."""
    modes = {m.strip().upper() for m in str(sql_mode or "").split(",")}
    return {"ansi_quotes": bool(modes & _ANSI_MODES), "backslash_escapes": "NO_BACKSLASH_ESCAPES" not in modes,
            "mssql_brackets": "MSSQL" in modes}


def _word_char(c: str) -> bool:
    return c.isalnum() or c in "_$" if c.isascii() else c.isalnum()


# _word_char as a pattern (`\w` is str.isalnum() or `_`: equal to it on every code point), and what no text may hold:
# the loops of the tokenizer's hottest paths in C (a restore's check of 10,000 tables' CREATEs)
_WORD_RUN = re.compile(r"[\w$]*")
_REFUSED_CHARS = re.compile("[\x00\ud800-\udfff]")


def _quoted_end(text: str, i: int, quote: str, escapes: bool) -> int:
    """The end of the string or quoted identifier that opens at text[i] (a doubled quote is one quote)."""
    j, n = i + 1, len(text)
    while True:
        k = text.find(quote, j)
        b = text.find("\\", j, k if k >= 0 else n) if escapes else -1
        if b >= 0:
            if b + 1 >= n:
                break
            if not text[b + 1].isascii():
                raise SqlTextError("a backslash before a non-ASCII character in a string (the server reads it byte "
                                   "by byte, so its meaning depends on the character set)", b)
            j = b + 2
            continue
        if k < 0:
            break
        if text.startswith(quote, k + 1):
            j = k + 2
            continue
        return k + 1
    kind = "identifier" if quote in "`]" else "string"
    raise SqlTextError(f"an unterminated {kind} (opened by {text[i]})", i)


def _number_or_word(text: str, i: int) -> tuple[str, int]:
    """A token that starts with a digit: a number (12, 1.5e3, 0x1F, 0b101) or an identifier like 1abc."""
    n = len(text)
    j = i + 1
    if text[i] == "0" and j < n and text[j] in "xb":
        digits = "0123456789abcdefABCDEF" if text[j] == "x" else "01"
        k = j + 1
        while k < n and text[k] in digits:
            k += 1
        if k > j + 1 and (k == n or not _word_char(text[k])):
            return NUMBER, k
    while j < n and text[j].isascii() and text[j].isdigit():
        j += 1
    if j < n and text[j] in "eE":
        k = j + 1 + (text[j + 1:j + 2] in ("+", "-") and text[j + 2:j + 3].isdigit())
        if k < n and text[k].isascii() and text[k].isdigit():
            while k < n and text[k].isascii() and text[k].isdigit():
                k += 1
            return NUMBER, k
    if j < n and _word_char(text[j]):
        while j < n and _word_char(text[j]):
            j += 1
        return WORD, j
    if j < n and text[j] == "." and text[j + 1:j + 2] != ".":
        return NUMBER, _fraction(text, j)
    return NUMBER, j


def _fraction(text: str, j: int) -> int:
    """The end of a number's `.digits[e[+-]digits]` that starts at the dot text[j]."""
    n = len(text)
    j += 1
    while j < n and text[j].isascii() and text[j].isdigit():
        j += 1
    if j < n and text[j] in "eE":
        k = j + 1 + (text[j + 1:j + 2] in ("+", "-"))
        if k < n and text[k].isascii() and text[k].isdigit():
            while k < n and text[k].isascii() and text[k].isdigit():
                k += 1
            return k
    return j


def iter_tokens(text: str, ansi_quotes: bool = False, backslash_escapes: bool = True,
                mssql_brackets: bool = False) -> Iterator[Token]:
    """The tokens of `text`, every character in exactly one; raises SqlTextError (see the module doc)."""
    refused = _REFUSED_CHARS.search(text)
    if refused:
        raise SqlTextError("a NUL character or an unpaired surrogate", refused.start())
    n, i, exec_end, after_word = len(text), 0, -1, -1
    while i < n:
        c, nxt = text[i], text[i + 1:i + 2]
        if exec_end >= 0 and text.startswith("*/", i):
            yield Token(EXEC_CLOSE, "*/", i, True)
            i, exec_end = i + 2, -1
            continue
        kind, end = OP, i + 1
        if c in _WHITE:
            while end < n and text[end] in _WHITE:
                end += 1
            kind = SPACE
        elif c == "#" or (c == "-" and nxt == "-" and (i + 2 == n or ord(text[i + 2]) < 33 or text[i + 2] == "\x7f")):
            end = text.find("\n", i)
            kind, end = COMMENT, (n if end < 0 else end)
        elif c == "-" and nxt == "-" and not text[i + 2].isascii():
            raise SqlTextError("`--` before a non-ASCII character (a comment or not, depending on the character set)", i)
        elif c == "/" and nxt == "*":
            if text.startswith("!", i + 2) or text.startswith("M!", i + 2):
                if exec_end >= 0:
                    raise SqlTextError("an executable comment inside another", i)
                end = i + (4 if text[i + 2] == "M" else 3)
                if text[end:end + 5].isascii() and text[end:end + 5].isdigit() and len(text[end:end + 5]) == 5:
                    end += 6 if text[end + 5:end + 6].isascii() and text[end + 5:end + 6].isdigit() else 5
                exec_end = text.find("*/", end)
                if exec_end < 0:
                    raise SqlTextError("an unterminated executable comment", i)
                if "/*" in text[end:exec_end]:
                    raise SqlTextError("a comment inside an executable comment", i)
                yield Token(EXEC_OPEN, text[i:end], i, True)
                i = end
                continue
            end = text.find("*/", i + 2)
            if end < 0:
                raise SqlTextError("an unterminated comment", i)
            kind, end = COMMENT, end + 2
        elif c == "'" or (c == '"' and not ansi_quotes):
            kind, end = STRING, _quoted_end(text, i, c, backslash_escapes)
        elif c in '`"' or (c == "[" and mssql_brackets):
            kind, end = IDENT, _quoted_end(text, i, "]" if c == "[" else c, False)
        elif c in "xXbB" and nxt == "'":
            close = text.find("'", i + 2)
            body = text[i + 2:close] if close > 0 else "?"
            if set(body) - set("0123456789abcdefABCDEF" if c in "xX" else "01") or (c in "xX" and len(body) % 2):
                raise SqlTextError(f"a malformed {c}'...' literal", i)
            kind, end = STRING, close + 1
        elif c in "nN" and nxt == "'":
            kind, end = STRING, _quoted_end(text, i + 1, "'", backslash_escapes)
        elif c.isascii() and c.isdigit():
            kind, end = _number_or_word(text, i)
        elif c == "." and nxt.isascii() and nxt.isdigit() and after_word != i:  # `t.5x`: a name after a name's dot
            kind, end = NUMBER, _fraction(text, i)
        elif _word_char(c):
            end = _WORD_RUN.match(text, end).end()  # type: ignore[union-attr]  # (`*`: it always matches)
            kind = WORD
        elif c == "@":
            yield Token(OP, "@", i, exec_end >= 0)
            i = end
            while end < n and text[end] in _HOST:
                end += 1
            if end == i or (nxt and nxt in "@'\"`"):
                continue
            kind = AT_NAME
        elif not (c.isascii() and c.isprintable()):
            raise SqlTextError(f"the character {c!r} outside strings, identifiers and comments", i)
        if exec_end >= 0 and end > exec_end:
            raise SqlTextError("an executable comment that ends inside a string, identifier or comment", i)
        yield Token(kind, text[i:end], i, exec_end >= 0)
        after_word = end if kind == WORD else -1
        i = end
    if exec_end >= 0:
        raise SqlTextError("an unterminated executable comment", n)


def tokenize(text: str, ansi_quotes: bool = False, backslash_escapes: bool = True, mssql_brackets: bool = False) -> list[Token]:
    """Every token of `text` (see iter_tokens)."""
    return list(iter_tokens(text, ansi_quotes, backslash_escapes, mssql_brackets))


def tokenize_any_mode(text: str, until: frozenset[str] = frozenset(), double_quotes: bool = False) -> list[Token]:
    """The tokens of `text` when they are the same whatever the session's sql_mode (ANSI_QUOTES,
    NO_BACKSLASH_ESCAPES, MSSQL): no escape the modes read differently, no double-quoted token (unless
    `double_quotes`: then a "..." token may be a string or a name). For statements lastline runs under a
    sql_mode it does not pick; with `until`, only the tokens up to the first of those keywords outside
    parentheses (a statement's header)."""
    plain, other = iter_tokens(text), iter_tokens(text, True, False, True)
    out: list[Token] = []
    depth = 0
    for a in plain:
        b = next(other, None)
        if b is None or (a.pos, a.end) != (b.pos, b.end) or (a.kind == STRING and a.text[0] == '"' and not double_quotes):
            raise SqlTextError("text that reads differently under other sql_modes (a double-quoted or bracketed name "
                               "or string, or a backslash escape)", a.pos)
        out.append(a)
        depth += is_op(a, "(") - is_op(a, ")")
        if depth == 0 and a.kind == WORD and a.text.upper() in until:
            break
    return out


def significant(tokens: list[Token]) -> list[Token]:
    """The tokens that are code: no whitespace, comments or executable-comment markers (their content stays)."""
    return [t for t in tokens if t.kind not in (SPACE, COMMENT, EXEC_OPEN, EXEC_CLOSE)]


def is_op(tok: Token | None, char: str) -> bool:
    return tok is not None and tok.kind == OP and tok.text == char


def word_at(sig: list[Token], i: int) -> str:
    """The upper-cased keyword at sig[i], or "" (not a word, or an identifier because a `.` touches it)."""
    if i >= len(sig) or sig[i].kind != WORD:
        return ""
    t = sig[i]  # the server reads a name, not a keyword, right after a `.`, and before `.` + a name character
    if (i > 0 and is_op(sig[i - 1], ".") and sig[i - 1].end == t.pos) or (
            i + 2 < len(sig) and is_op(sig[i + 1], ".") and sig[i + 1].pos == t.end
            and sig[i + 2].pos == t.end + 1 and sig[i + 2].kind in (WORD, NUMBER)):
        return ""
    return t.text.upper()


def words_at(sig: list[Token], i: int, *words: str) -> bool:
    """Whether the keywords `words` come in order from sig[i]."""
    return all(word_at(sig, i + k) == w for k, w in enumerate(words))


def ident_value(tok: Token | None) -> str | None:
    """The name an identifier token stands for (quotes removed, doubled quotes undone); None if not a name."""
    if tok is None:
        return None
    if tok.kind == WORD:
        return tok.text
    if tok.kind == IDENT:
        q = tok.text[-1]
        return tok.text[1:-1].replace(q + q, q)
    return None


def string_value(tok: Token, backslash_escapes: bool = True) -> str | None:
    """The value of a plain quoted string token ('...' or "..."), escapes undone; None if not one."""
    if tok.kind != STRING or tok.text[0] not in "'\"":
        return None
    q, body, out, k = tok.text[0], tok.text[1:-1], [], 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "0": "\0", "Z": "\x1a"}
    while k < len(body):
        c = body[k]
        if c == "\\" and backslash_escapes:
            out.append("\\" + body[k + 1] if body[k + 1] in "%_" else escapes.get(body[k + 1], body[k + 1]))
            k += 2
        else:
            out.append(c)
            k += 2 if c == q else 1
    return "".join(out)


def matching_paren(sig: list[Token], i: int) -> int:
    """The index of the `)` that closes the `(` at sig[i]."""
    depth = 0
    for k in range(i, len(sig)):
        if sig[k].kind == OP:  # (is_op, inline: on the path of every table's check)
            depth += (sig[k].text == "(") - (sig[k].text == ")")
        if depth == 0:
            return k
    raise SqlTextError("an unbalanced parenthesis", sig[i].pos)


def split_top_level(sig: list[Token], start: int, end: int) -> list[tuple[int, int]]:
    """The (first, after-last) index ranges of sig[start:end] between commas outside parentheses."""
    out, depth, first = [], 0, start
    for k in range(start, end):
        if sig[k].kind == OP:  # (is_op, inline)
            depth += (sig[k].text == "(") - (sig[k].text == ")")
            if depth == 0 and sig[k].text == ",":
                out.append((first, k))
                first = k + 1
    out.append((first, end))
    return out


_END_X = {"IF", "LOOP", "WHILE", "REPEAT", "FOR", "CASE"}  # END IF, END LOOP, ...: they close only their own
_STARTS_AFTER = {"BEGIN", "ATOMIC", "THEN", "ELSE", "DO", "LOOP", "REPEAT"}  # a statement may start after these


def _handler_end(sig: list[Token], i: int) -> int:
    """The index after `HANDLER FOR <conditions>` at sig[i] (where the handler's statement starts)."""
    j = i + 2
    while j < len(sig):
        if word_at(sig, j) == "SQLSTATE":
            j += 3 if word_at(sig, j + 1) == "VALUE" else 2
        elif words_at(sig, j, "NOT", "FOUND"):
            j += 2
        else:
            j += 1
        if not is_op(sig[j] if j < len(sig) else None, ","):
            return j
        j += 1
    return j


def check_body(sig: list[Token], start: int) -> None:
    """sig[start:] is one stored-program statement: a `;` only inside a compound statement (BEGIN ... END,
    IF ... END IF, CASE ... END CASE, LOOP, WHILE, REPEAT, FOR), nothing after the end of the outermost one
    but its label. Raises SqlTextError otherwise (a body this cannot follow is refused, never guessed)."""
    stack: list[str] = []
    at_start, i, n = True, start, len(sig)
    while i < n:
        t, w = sig[i], word_at(sig, i)
        nxt = sig[i + 1] if i + 1 < n else None
        if is_op(t, ";"):
            if not stack:
                raise SqlTextError("a `;` outside a compound statement (a second statement)", t.pos)
            at_start, i = True, i + 1
            continue
        if w == "END":
            closes = word_at(sig, i + 1) if word_at(sig, i + 1) in _END_X else ""
            top = stack.pop() if stack else ""
            if (closes and top != closes) or (not closes and top not in ("BEGIN", "CASE")):
                raise SqlTextError(f"END {closes} that closes no {closes or 'BEGIN'}".replace("  ", " "), t.pos)
            i += 2 if closes else 1
            if not stack and (closes or top == "BEGIN"):  # the end of the body: only its label may follow
                rest = sig[i:]
                if len(rest) > 1 or (rest and rest[0].kind not in (WORD, IDENT)):
                    raise SqlTextError("something after the end of the statement", rest[0].pos)
                return
            at_start = False
            continue
        if w in ("BEGIN", "LOOP", "WHILE", "CASE") or (w == "REPEAT" and not is_op(nxt, "(")):
            stack.append(w)
        elif w in ("IF", "FOR") and at_start:
            group = matching_paren(sig, i + 1) if w == "IF" and is_op(nxt, "(") else -1
            if group < 0 or len(split_top_level(sig, i + 2, group)) != 3:  # IF(a, b, c) is the function
                stack.append(w)
        if w == "HANDLER" and word_at(sig, i + 1) == "FOR":
            at_start, i = True, _handler_end(sig, i)
            continue
        at_start = w in _STARTS_AFTER or (is_op(t, ":") and not is_op(nxt, "="))
        i += 1
    if stack:
        raise SqlTextError(f"a {stack[-1]} that is never closed", sig[-1].pos if sig else 0)
