"""The options mariabackup --prepare reads, through the allow-list (lastline.mariabackup.prepare_options)."""
from __future__ import annotations

import pytest

from lastline.core.errors import IntegrityError
from lastline.mariabackup import prepare_options

GOOD = {"innodb_data_file_path": "ibdata1:12M:autoextend", "innodb_log_file_size": "100663296",
        "innodb_page_size": "16384"}


@pytest.mark.parametrize("options, match", [
    ("not a mapping", "not a mapping"),
    ({**GOOD, "plugin_load": "x.so"}, "plugin_load"),
    ({**GOOD, "innodb_page_size": "12345"}, "not a valid innodb_page_size"),
    ({**GOOD, "innodb_data_file_path": "/etc/ibdata1:12M"}, "not a valid innodb_data_file_path"),
    ({"innodb_page_size": "16384"}, "lack innodb_data_file_path"),
], ids=["not a mapping", "an option not allowed", "a bad page size", "a folder in the data files", "missing"])
def test_checked_refuses(options, match):
    with pytest.raises(IntegrityError, match=match):
        prepare_options.checked(options, "backup x")


def test_from_variables_keeps_file_names_and_lowers_the_checksum():
    options = prepare_options.from_variables({**GOOD, "innodb_data_file_path": "/var/lib/mysql/ibdata1:12M:autoextend",
                                              "innodb_checksum_algorithm": "FULL_CRC32", "version": "10.11.6"})
    assert options["innodb_data_file_path"] == "ibdata1:12M:autoextend"
    assert options["innodb_checksum_algorithm"] == "full_crc32" and "version" not in options


@pytest.mark.parametrize("text, ok", [
    ("# comment\n[mysqld]\n" + "\n".join(f"{k}={v}" for k, v in GOOD.items()) + "\ninnodb_undo_directory=./\n", True),
    ("[mysqld]\n" + "\n".join(f"{k}={v}" for k, v in GOOD.items()) + "\nplugin_dir=/tmp\n", False),
    ("!include /etc/x.cnf\n", False),
    ("[mysqld]\n" + "\n".join(f"{k}={v}" for k, v in GOOD.items()) + "\ninnodb_page_size=4096\n", False),
], ids=["mariabackup's own", "plugin_dir", "include", "twice"])
def test_parse(text, ok):
    if ok:
        assert prepare_options.parse(text, "backup x") == GOOD
    else:
        with pytest.raises(IntegrityError):
            prepare_options.parse(text, "backup x")


def test_render_reads_back_as_it_was_written():
    text = prepare_options.render(GOOD)
    assert text.startswith("# written by lastline") and "innodb_undo_directory=./" in text
    assert prepare_options.parse(text, "rendered") == GOOD
