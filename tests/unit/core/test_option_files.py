"""core.option_files: reading a server's option files (names normalised, only the server's groups, includes found,
the files a command line starts from) and writing a client's (credentials quoted, socket or TCP, TLS)."""
from __future__ import annotations

import pytest

from lastline.core.option_files import DEFAULT_FILES, Setting, normalise, option_file_text, parse, server_group, starting_files
from lastline.core.servers import Server


@pytest.mark.parametrize(("name", "normal"), [
    ("datadir", "datadir"), ("loose_Master_Host", "master-host"), (" Innodb_Buffer_Pool_Size ", "innodb-buffer-pool-size"),
    ("loose-skip-grant", "skip-grant"), ("looser", "looser")],
    ids=["plain", "loose-prefix-and-underscores", "case-and-spaces", "loose-dash", "loose-only-as-a-prefix-word"])
def test_normalise(name, normal):
    assert normalise(name) == normal


@pytest.mark.parametrize(("group", "suffix", "reads"), [
    ("mysqld", "", True), ("mariadb", "", True), ("mariadbd", "", True), ("server", "", True), ("galera", "", True),
    ("client-server", "", True), ("mariadb-10.11", "", True), ("mysqld-8.0", "", True), ("client", "", False),
    ("mysqldump", "", False), ("mariadb-backup", "", False), ("mysqld_safe", "", False), ("mysqldfoo", "foo", True),
    ("clientfoo", "foo", False)],
    ids=["mysqld", "mariadb", "mariadbd", "server", "galera", "client-server", "versioned-mariadb", "versioned-mysqld",
         "client", "mysqldump", "not-a-version", "mysqld_safe", "group-suffix", "suffix-on-a-client-group"])
def test_server_group(group, suffix, reads):
    assert server_group(group, suffix) is reads


def test_parse_reads_groups_settings_and_includes():
    text = ("# comment\n; another\n[mysqld]\ndatadir = /var/lib/mysql\nloose_log_bin='binlog'\nskip-name-resolve\n\n"
            "!include /etc/extra.cnf\n!includedir conf.d\n[Client]\nport=3307\n")
    settings, includes = parse("/etc/my.cnf", text)
    assert settings == [
        Setting("/etc/my.cnf", 4, "mysqld", "datadir", "/var/lib/mysql"),
        Setting("/etc/my.cnf", 5, "mysqld", "log-bin", "binlog"),
        Setting("/etc/my.cnf", 6, "mysqld", "skip-name-resolve", ""),
        Setting("/etc/my.cnf", 11, "client", "port", "3307"),
    ]
    assert includes == ["/etc/extra.cnf", "dir:conf.d"]
    assert settings[0].where() == "/etc/my.cnf:4 [mysqld]"


@pytest.mark.parametrize(("argv", "files", "suffix"), [
    (["mariadbd"], DEFAULT_FILES, ""),
    (["mariadbd", "--defaults-file=/srv/my.cnf", "--port=3307"], ["/srv/my.cnf"], ""),
    (["mariadbd", "--defaults-extra-file=/srv/extra.cnf"], [*DEFAULT_FILES, "/srv/extra.cnf"], ""),
    (["mariadbd", "--defaults-file=/a.cnf", "--defaults-extra-file=/b.cnf", "--defaults-group-suffix=_x"], ["/a.cnf", "/b.cnf"], "_x"),
    (["/usr/sbin/--defaults-file=/not-an-option"], DEFAULT_FILES, ""),
], ids=["compiled-in-list", "defaults-file-replaces-it", "extra-file-adds", "all-three", "argv0-is-no-option"])
def test_starting_files(argv, files, suffix):
    assert starting_files(argv) == (files, suffix)


@pytest.mark.parametrize(("server", "on_host", "lines"), [
    (Server("a", host="db1", port=3307, user="bk", password='p"w\\d'), False,
     ['user="bk"', 'password="p\\"w\\\\d"', "host=db1", "port=3307", "protocol=TCP"]),
    (Server("a", user="bk", socket="/run/mysqld.sock"), False, ['user="bk"', 'password=""', 'socket="/run/mysqld.sock"']),
    (Server("a", socket="/run/mysqld.sock", ssh_conn_id="ssh1", host="db1"), False,
     ['user="root"', 'password=""', "host=db1", "port=3306", "protocol=TCP"]),
    (Server("a", socket="/run/mysqld.sock", ssh_conn_id="ssh1"), True, ['user="root"', 'password=""', 'socket="/run/mysqld.sock"']),
    (Server("a", ssl={"ca": "/ca.pem", "cert": ""}, ssl_mode="VERIFY_IDENTITY"), False,
     ['user="root"', 'password=""', "host=127.0.0.1", "port=3306", "protocol=TCP", 'ssl-ca="/ca.pem"', "ssl", "ssl-verify-server-cert"]),
    (Server("a", ssl_mode="REQUIRED"), False, ['user="root"', 'password=""', "host=127.0.0.1", "port=3306", "protocol=TCP", "ssl"]),
], ids=["tcp-and-quoted-password", "local-socket", "socket-of-a-remote-server-not-used-here", "socket-on-its-own-host",
        "tls-verified", "tls-required-only"])
def test_option_file_text(server, on_host, lines):
    assert option_file_text(server, on_host=on_host) == "[client]\n" + "\n".join(lines) + "\n"


def test_option_file_text_repeats_the_body_per_section():
    text = option_file_text(Server("a", user="u"), sections=("client", "mariabackup"))
    first, second = text.split("[mariabackup]\n")
    assert first.removeprefix("[client]\n") == second
