"""The options `mariabackup --prepare` reads from `<datadir>/backup-my.cnf`, its only option file.

A backup's own `backup-my.cnf` comes from storage, and `plugin_dir`/`plugin_load` there make prepare load a library
(as whoever runs it), so lastline never hands it to mariabackup: it records the few options prepare needs at backup
time (from the source's server variables), checks each one against an allow-list with a pattern for its value, and
writes the file prepare reads from those. mariabackup's own writer (`write_backup_config_file`) emits these options
and, for a server with an encryption plugin, that plugin's settings, which lastline does not pass on.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from lastline.core.errors import IntegrityError

CNF = "backup-my.cnf"
MAX_CNF_BYTES = 64 * 1024  # mariabackup's file is about 300 bytes
UNDO_DIRECTORY = "./"  # mbstream puts the undo tablespaces in the datadir itself

_CHECKSUMS = frozenset({"crc32", "strict_crc32", "full_crc32", "strict_full_crc32", "innodb", "strict_innodb",
                        "none", "strict_none"})
_SIZE = r"[0-9]{1,15}[KkMmGgTt]?"
_FILE = rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,63}}:{_SIZE}"
_DATA_FILE_PATH = re.compile(rf"{_FILE}(?:;{_FILE})*(?::autoextend(?::max:{_SIZE})?)?")


def _number(low: int, high: int) -> Callable[[str], bool]:
    return lambda v: v.isascii() and v.isdigit() and len(v) <= 15 and low <= int(v) <= high


# name -> test of its value; a value is text of one line, as in an option file
ALLOWED: dict[str, Callable[[str], bool]] = {
    "innodb_checksum_algorithm": lambda v: v in _CHECKSUMS,
    "innodb_data_file_path": lambda v: _DATA_FILE_PATH.fullmatch(v) is not None,  # file names only, no folder
    "innodb_log_file_size": _number(1 << 20, 512 << 30),
    "innodb_page_size": lambda v: v in {"4096", "8192", "16384", "32768", "65536"},
    "innodb_undo_tablespaces": _number(0, 127),
    "innodb_compression_level": _number(0, 9),
}
REQUIRED = ("innodb_data_file_path", "innodb_log_file_size", "innodb_page_size")


def from_variables(variables: dict[str, str]) -> dict[str, str]:
    """The options to record in a backup's manifest, from the source's global variables (lower-case names); the data
    files by name only, as mariabackup writes them."""
    options = {name: str(variables[name]) for name in ALLOWED if variables.get(name) is not None}
    if "innodb_checksum_algorithm" in options:  # information_schema says it in upper case
        options["innodb_checksum_algorithm"] = options["innodb_checksum_algorithm"].lower()
    if "innodb_data_file_path" in options:
        options["innodb_data_file_path"] = ";".join(
            f.rsplit("/", 1)[-1] for f in options["innodb_data_file_path"].split(";"))
    return checked(options, "the source's server variables")


def checked(options: object, where: str) -> dict[str, str]:
    """`options` as recorded (a manifest's), each name on the allow-list and each value of its type; IntegrityError
    naming the first that is not."""
    if not isinstance(options, dict):
        raise IntegrityError(f"{where}: the recorded prepare options are not a mapping of names to values: choose "
                             "another backup.")
    for name, value in options.items():
        if name not in ALLOWED:
            raise IntegrityError(
                f"{where}: prepare option {str(name)[:80]!r} is not one mariabackup --prepare needs "
                f"({', '.join(ALLOWED)}): lastline never passes any other option to prepare. The backup was changed "
                "after it was written, or was not made by lastline: choose another backup.")
        if not isinstance(value, str) or not ALLOWED[name](value):
            raise IntegrityError(
                f"{where}: prepare option {name} has the value {str(value)[:80]!r}, which is not a valid {name}: "
                "the backup was changed after it was written. Choose another backup.")
    missing = [name for name in REQUIRED if name not in options]
    if missing:
        raise IntegrityError(f"{where}: the recorded prepare options lack {', '.join(missing)}: choose another backup.")
    return {name: options[name] for name in ALLOWED if name in options}


def parse(text: str, where: str) -> dict[str, str]:
    """The options of a backup-my.cnf as mariabackup writes it (comments, `[mysqld]`, `name=value` lines), read only
    through the allow-list: any other line (another option or group, an `!include`) is refused by name."""
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line == "[mysqld]":
            continue
        name, eq, value = line.partition("=")
        name = name.strip().replace("-", "_")
        if eq and name == "innodb_undo_directory" and value.strip() in (".", "./"):
            continue  # written by lastline as UNDO_DIRECTORY
        if not eq or name not in ALLOWED or name in options:
            raise IntegrityError(
                f"{where}: the backup's {CNF} holds {line[:80]!r}, which is not one of the options mariabackup "
                f"--prepare needs ({', '.join(ALLOWED)}, once each): lastline never hands a backup's option file to "
                "prepare and reads it only through that allow-list. An option such as plugin_load, plugin_dir, "
                "!include or a folder would make prepare load code or touch files the backup chose; a backup of a "
                "server with an encryption plugin cannot be prepared by lastline. Choose another backup; the "
                "target stays down, its datadir marked as an unfinished restore.")
        options[name] = value.strip()
    return checked(options, f"{where}: the backup's {CNF}")


def render(options: dict[str, str]) -> str:
    """The backup-my.cnf that prepare reads: the checked options and the undo folder, nothing else."""
    lines = [f"{name}={value}" for name, value in checked(options, "prepare options").items()]
    return "# written by lastline for mariabackup --prepare\n[mysqld]\n" + "\n".join(
        [*lines, f"innodb_undo_directory={UNDO_DIRECTORY}"]) + "\n"
