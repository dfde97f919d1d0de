"""Option files: the client ones lastline writes for its tools (a server's address and credentials, 0600,
never on a command line, never under a name a kill -9 leaves behind), and the ones a running server reads, with the settings in them, on whichever
host it runs.

Which files: the `--defaults-file` of the server's command line (read from /proc through its pid
file), else the compiled-in list (/etc/my.cnf, /etc/mysql/my.cnf, /etc/mysql/mariadb.cnf) plus any
`--defaults-extra-file`; then every `!include` and `!includedir` they name, and the connection's
`config_dir`. Only the groups the server itself reads count ([mysqld], [server], [mariadb],
[mariadbd], [galera], their -X.Y forms, and the --defaults-group-suffix variants).
"""
from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from lastline.core.hosts import LOCAL, Host
from lastline.core.servers import Server

DEFAULT_FILES = ["/etc/my.cnf", "/etc/mysql/my.cnf", "/etc/mysql/mariadb.cnf"]
SERVER_GROUPS = ("mysqld", "server", "mariadb", "mariadbd", "galera", "client-server")
_VERSIONED = re.compile(r"^(mysqld|mariadb|mariadbd)-\d+\.\d+$")


@dataclass(frozen=True)
class Setting:
    """One `name=value` line of an option file."""

    path: str
    line: int
    group: str
    name: str  # normalised: lower case, '_' as '-', without a `loose-` prefix
    value: str

    def where(self) -> str:
        return f"{self.path}:{self.line} [{self.group}]"


def normalise(name: str) -> str:
    """`loose_Master_Host` -> `master-host`."""
    name = name.strip().lower().replace("_", "-")
    return name[len("loose-"):] if name.startswith("loose-") else name


def server_group(group: str, suffix: str = "") -> bool:
    """Whether the server reads options from `[group]`."""
    bases = [g for g in (group, group[: -len(suffix)] if suffix and group.endswith(suffix) else None) if g]
    return any(b in SERVER_GROUPS or _VERSIONED.match(b) for b in bases)


def parse(path: str, text: str) -> tuple[list[Setting], list[str]]:
    """Settings of one file (all groups) and the paths its `!include`/`!includedir` lines name."""
    settings, includes = [], []
    group = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!include"):
            directive, _, target = line.partition(" ")
            includes.append(("dir:" if directive == "!includedir" else "") + target.strip())
            continue
        if line.startswith("[") and "]" in line:
            group = line[1: line.index("]")].strip().lower()
            continue
        name, _, value = line.partition("=")
        settings.append(Setting(path, n, group, normalise(name), value.strip().strip("'\"")))
    return settings, includes


_READ = r'''
for p in "$@"; do
  if [ -d "$p" ]; then for f in "$p"/*.cnf; do [ -f "$f" ] && printf '@@lastline-file %s\n' "$f" && cat "$f"; done
  elif [ -f "$p" ]; then printf '@@lastline-file %s\n' "$p"; cat "$p"; fi
done
exit 0
'''
_FILE_RE = re.compile(r"^@@lastline-file (.+)$", re.M)


def _read_all(host: Host, paths: list[str]) -> dict[str, str]:
    """{file: text} for the given files and every *.cnf in the given folders (missing ones skipped)."""
    out = host.sh(_READ, *paths)
    marks = list(_FILE_RE.finditer(out))
    return {m[1]: out[m.end() + 1: marks[i + 1].start() if i + 1 < len(marks) else len(out)] for i, m in enumerate(marks)}


def server_command_line(host: Host, pid_file: str) -> list[str]:
    """The running server's argv, read through its pid file (empty if it cannot be read)."""
    out = host.sh('pid=$(cat "$1" 2>/dev/null) && tr "\\0" "\\n" < "/proc/$pid/cmdline" 2>/dev/null || true', pid_file)
    return [a for a in out.split("\n") if a]


def starting_files(argv: list[str]) -> tuple[list[str], str]:
    """The option files a server with this command line starts from, and its group suffix."""
    opts = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv[1:] if a.startswith("--defaults") and "=" in a}
    files = [opts["--defaults-file"]] if "--defaults-file" in opts else list(DEFAULT_FILES)
    if "--defaults-extra-file" in opts:
        files.append(opts["--defaults-extra-file"])
    return files, opts.get("--defaults-group-suffix", "")


def read_settings(host: Host, files: list[str], extra_dirs: list[str] | tuple[str, ...] = (), suffix: str = "") -> list[Setting]:
    """Every setting in the server's groups of `files` and `extra_dirs`, following includes (each file
    read once)."""
    requested: set[str] = set()
    parsed: set[str] = set()
    pending = list(files) + [f"dir:{d}" for d in extra_dirs if d]
    settings: list[Setting] = []
    while pending:
        batch = [p for p in dict.fromkeys(pending) if p not in requested]
        pending = []
        requested.update(batch)
        for path, text in (_read_all(host, [p.removeprefix("dir:") for p in batch]) if batch else {}).items():
            if path in parsed:
                continue
            parsed.add(path)
            found, includes = parse(path, text)
            settings += [s for s in found if server_group(s.group, suffix)]
            for inc in includes:
                base = inc.removeprefix("dir:")
                full = base if base.startswith("/") else posixpath.join(posixpath.dirname(path), base)
                pending.append(("dir:" if inc.startswith("dir:") else "") + full)
    return settings


def _escape_option(value: str) -> str:
    """Quote a value for a MySQL option file (handles #, quotes, backslashes, spaces)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def option_file_text(server: Server, sections: tuple[str, ...] = ("client",), on_host: bool = False) -> str:
    """The text of an option file that carries the server's address and credentials (`on_host`: for a
    command run on the server's own SSH host, where its socket is)."""
    body = [f"user={_escape_option(server.user)}", f"password={_escape_option(server.password)}"]
    if server.socket and (on_host or not server.ssh_conn_id):
        body.append(f"socket={_escape_option(server.socket)}")
    else:
        body += [f"host={server.host}", f"port={server.port}", "protocol=TCP"]
    ssl = server.ssl or {}
    for key in ("ca", "cert", "key", "capath", "cipher"):
        if ssl.get(key):
            body.append(f"ssl-{key}={_escape_option(ssl[key])}")
    if ssl or server.ssl_mode:
        body.append("ssl")
    if server.ssl_mode in ("VERIFY_CA", "VERIFY_IDENTITY"):
        body.append("ssl-verify-server-cert")
    return "".join(f"[{section}]\n" + "\n".join(body) + "\n" for section in sections)


@contextlib.contextmanager
def option_file(server: Server, sections: tuple[str, ...] = ("client",), on_host: bool = False) -> Iterator[str]:
    """Yield the path of a 0600 option file with the server's credentials, with no name on disk (Host.private_file:
    a memfd here, a held and unlinked file on an SSH host); gone afterwards, or when the worker dies.

    `on_host=True` writes it on the server's own host (over SSH for connections with ssh_conn_id), for
    commands that run there (mariabackup). Pass it as the FIRST argument: ``--defaults-extra-file=PATH``.
    mariabackup needs its own ``mariabackup`` group too, or it would take the host's ``[mysqld]``
    settings for the server.
    """
    host = server.runner() if on_host else LOCAL
    with host.private_file(option_file_text(server, sections, on_host)) as path:
        yield path
