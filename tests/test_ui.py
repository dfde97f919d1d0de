"""`make ui` (tools/lastline_dev/ui.py) chooses its ports on 127.0.0.1: each one asked for, or the next free one above
it when something holds it (a socket opened here), never one it already chose; the URL it prints is the port chosen."""
from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lastline_dev import ui


@contextmanager
def held(host: str = "127.0.0.1", family: socket.AddressFamily = socket.AF_INET) -> Iterator[int]:
    """A port another process would hold: bound and listening on `host` for the duration."""
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_run(length: int) -> int:
    """The first of `length` consecutive ports free on 127.0.0.1 now (from an ephemeral one upwards)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        start = sock.getsockname()[1]
    for first in range(start, 65536 - length):
        if all(ui.port_free(p) for p in range(first, first + length)):
            return first
    pytest.skip("no run of free ports on this machine")


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"], ids=["held-on-loopback", "held-on-every-address"])
def test_a_held_port_is_skipped_for_the_next_free_one(host):
    with held(host) as port:
        assert not ui.port_free(port)
        chosen = ui.next_free(port)
        assert chosen > port and ui.port_free(chosen)
    assert ui.port_free(port) and ui.next_free(port) == port  # let go: it is the one asked for again


def test_a_port_held_on_ipv6_every_address_is_skipped():
    """A dual-stack server on `::` (as uvicorn on `::` is) holds 127.0.0.1's port too."""
    try:
        sock = socket.socket(socket.AF_INET6)
    except OSError:
        pytest.skip("IPv6 is off here")
    with sock:
        try:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", 0))
        except OSError:
            pytest.skip("IPv6 is off here")
        sock.listen()
        port = sock.getsockname()[1]
        assert not ui.port_free(port) and ui.next_free(port) > port


def test_a_free_port_asked_for_is_used_as_is():
    first = free_run(1)
    assert ui.next_free(first) == first


def test_the_ports_chosen_are_distinct_and_each_held_one_moves_up():
    first = free_run(6)
    env = {"LASTLINE_UI_PORT": str(first), "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(first),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(first + 1)}
    assert ui.choose_ports(env) == {"LASTLINE_UI_PORT": first, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": first + 1,
                                    "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": first + 2}
    with socket.socket() as sock:  # the UI's port held by someone else: everything moves one up
        sock.bind(("127.0.0.1", first))
        sock.listen()
        assert ui.choose_ports(env) == {"LASTLINE_UI_PORT": first + 1,
                                        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": first + 2,
                                        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": first + 3}


def test_the_defaults_are_airflows_and_an_empty_setting_means_its_default():
    assert dict(ui.PORTS) == {"LASTLINE_UI_PORT": 8080, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": 8793,
                              "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": 8794}
    chosen = ui.choose_ports({"LASTLINE_UI_PORT": ""})
    assert chosen["LASTLINE_UI_PORT"] >= 8080 and chosen["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] >= 8793
    assert len(set(chosen.values())) == 3 and all(ui.port_free(p) for p in chosen.values())


@pytest.mark.parametrize("asked", ["0", "65536", "80a", "-1"], ids=["zero", "past-the-last", "not-a-number", "negative"])
def test_a_setting_that_is_no_port_is_refused(asked):
    with pytest.raises(RuntimeError, match="is not a port"):
        ui.choose_ports({"LASTLINE_UI_PORT": asked})


def test_no_free_port_in_the_search_says_so(monkeypatch):
    monkeypatch.setattr(ui, "SEARCH", 1)
    with held() as port, pytest.raises(RuntimeError, match=f"no free port on 127.0.0.1 from {port} to {port}"):
        ui.next_free(port)


def test_the_url_printed_is_the_port_served(monkeypatch, capsys, tmp_path):
    """main() with a held UI port: it says the port moved, prints the URL of the one it serves, and hands Airflow
    that port (its API and the execution API's URL) and the log servers' ports it chose."""
    served: dict = {}
    monkeypatch.setattr(ui, "DEMO", tmp_path)
    (tmp_path / "backups").mkdir()
    monkeypatch.setattr(ui, "servers", lambda: {"source": type("S", (), {"exists": lambda self: True})()})
    monkeypatch.setattr(ui, "start_servers", lambda: {})
    monkeypatch.setattr(ui, "save_connections", lambda found: None)
    monkeypatch.setattr(ui.os, "execve", lambda path, argv, env: served.update(env))
    with held() as port:
        monkeypatch.setenv("LASTLINE_UI_PORT", str(port))
        ui.main()
    out = capsys.readouterr().out
    chosen = int(served["AIRFLOW__API__PORT"])
    assert chosen != port and f"port {port} (LASTLINE_UI_PORT) is taken on 127.0.0.1: using {chosen}" in out
    assert f"http://127.0.0.1:{chosen} " in out and f"http://127.0.0.1:{port} " not in out
    assert served["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"http://127.0.0.1:{chosen}/execution/"
    logs = {int(served[n]) for n in ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT")}
    assert len(logs) == 2 and chosen not in logs
