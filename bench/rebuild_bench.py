"""Replica rebuild: lastline's one SSH stream against backup to a local file + copy + restore, same data,
one run, ratio printed.

    make bench-rebuild ARGS="--gb 1"     (or: .venv/bin/python bench/rebuild_bench.py --gb 1)

A source sandbox of about --gb GB, a replica sandbox whose commands all go through a real sshd on
loopback (the "other node"), both on this machine:
1. lastline: replica_rebuild's steps (stop, ONE stream `mariabackup | zstd -1 | ssh replica "zstd -d |
   mbstream -x"`, prepare, start, attach, catch up), run as the DAG's tasks run them, minus the
   scheduler;
2. by hand, the way it is done without streaming: `mariabackup --stream | zstd -1 > local file`, `scp`
   to the replica's host, `zstd -d | mbstream -x` there, prepare, start.
The ratio is (2) / (1) for the part both share: from the first byte read to a started replica.
Two rounds: over loopback with no cap (both "nodes" share this machine's 2 cores and page cache, so
the intermediate files cost next to nothing), then with both methods capped to --link-mb MB/s on the
wire (the rebuild's own `max_mb_per_s`, `scp -l`), as between two machines on a 1 Gbit/s link.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="lastline-bench-airflow-"))

from lastline.connections import host_for
from lastline.core.compression import codec  # noqa: E402
from lastline.core.hosts import CIPHERS  # noqa: E402
from lastline.core.option_files import option_file  # noqa: E402
from lastline.mariabackup.commands import default_use_memory  # noqa: E402
from lastline.replication import rebuild as replica_rebuild  # noqa: E402
from lastline_dev import sshd_sandbox  # noqa: E402
from lastline_dev.sandbox import Instance  # noqa: E402

REPL_PASSWORD = "bench-repl-pw"


def sh(cmd: str) -> float:
    """Run a bash pipeline with pipefail; return seconds."""
    t0 = time.monotonic()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def wait_idle(inst: Instance, timeout: float = 120) -> None:
    """Wait until a freshly started server has loaded its buffer pool: that background work would
    otherwise slow whichever method runs first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = inst.server().query("SHOW STATUS LIKE 'Innodb_buffer_pool_load_status'")
        if not status or "completed" in status[0][1] or "not started" in status[0][1].lower():
            return
        time.sleep(0.5)


def setup(root: Path, gb: float) -> tuple[Instance, Instance, sshd_sandbox.Sshd]:
    """The sshd, the source (with data and a replication user) and the replica, as Airflow connections."""
    sshd = sshd_sandbox.start(root / "sshd")
    os.environ["AIRFLOW_CONN_B_SSH"] = json.dumps(sshd.connection())
    source = Instance(root, "source")
    if not source.exists():
        print(f"creating the source with about {gb} GB of rows (once; kept in {root})", flush=True)
        source.create()
        source.load_bulk(int(gb * 1000))
        conn = source.server().connect()
        cur = conn.cursor()
        cur.execute("CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY %s", (REPL_PASSWORD,))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'")
        conn.close()
    source.start()
    wait_idle(source)
    replica = Instance(root, "replica")
    if not replica.exists():
        replica.create()
    for conn_id, inst, extra in (("b_source", source, {}), ("b_replica", replica, {"ssh_conn_id": "b_ssh"})):
        conn = inst.connection(conn_id)
        conn["extra"].update(extra)
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    os.environ["AIRFLOW_CONN_B_REPL"] = json.dumps({"conn_type": "mysql", "host": "127.0.0.1",
                                                   "port": source.meta()["port"], "login": "repl", "password": REPL_PASSWORD})
    return source, replica, sshd


def lastline_rebuild(parallel: int, use_memory: int, compression: str, link_mb: float) -> dict[str, float]:
    """replica_rebuild's tasks, in order; seconds per step."""
    conf = {"source_conn_id": "b_source", "target_conn_id": "b_replica", "replication_conn_id": "b_repl",
            "compression": compression, "parallel": parallel, "use_memory": use_memory, "force": True,
            "max_mb_per_s": link_mb}
    plan = replica_rebuild.preflight(conf)
    replica_rebuild.stop_target(plan)
    out: dict[str, float] = {}
    t0 = time.monotonic()
    streamed = replica_rebuild.stream(plan)
    out["stream"] = time.monotonic() - t0
    out["prepare"] = replica_rebuild.prepare(plan).seconds
    out["start"] = replica_rebuild.start_target(plan).seconds
    out["to started replica"] = time.monotonic() - t0
    attached = replica_rebuild.attach(plan, streamed)
    while (caught := replica_rebuild.caught_up(plan, attached)) is None:  # the DAG's sensor, poked back to back
        pass
    out["attach + catch up"] = attached.seconds + caught.seconds
    replica_rebuild.finish(plan, streamed, replica_rebuild.verify(plan))
    out["MB on the wire"] = streamed.bytes / 1e6
    return out


def by_hand(source: Instance, replica: Instance, sshd: sshd_sandbox.Sshd, work: Path, parallel: int, use_memory: int,
            compression: str, link_mb: float) -> dict[str, float]:
    """Backup to a local file, scp it to the replica's host, unpack there, prepare, start (same codec)."""
    c = codec(compression)
    compress, decompress = shlex.join(c.compress_argv(parallel) or ["cat"]), shlex.join(c.decompress_argv(parallel) or ["cat"])
    host = host_for("b_ssh")
    ssh = shlex.join(host.ssh_argv("")[:-2])  # the same client options, key and pinned host key
    scp = shlex.join(["scp", "-q", "-F", "none", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={host.known_hosts}",
                      "-o", f"Ciphers={CIPHERS}",
                      "-o", "StrictHostKeyChecking=yes", "-i", host.key_file, "-P", str(sshd.port)]
                     + (["-l", str(int(link_mb * 8000))] if link_mb else []))  # scp -l: Kbit/s
    local, remote = work / "local", work / "remote"
    for d in (local, remote):
        d.mkdir(parents=True, exist_ok=True)
    datadir = replica.datadir
    replica.stop()
    subprocess.run(["bash", "-c", f"rm -rf {shlex.quote(str(datadir))}/* {shlex.quote(str(datadir))}.lastline-aside-*"], check=True)
    out: dict[str, float] = {}
    t0 = time.monotonic()
    with option_file(source.server(), ("client", "mariabackup")) as opt:
        out["backup to file"] = sh(
            f"mariabackup --defaults-extra-file={opt} --backup --stream=xbstream --parallel={parallel} "
            f"--datadir={source.datadir} --target-dir=/tmp 2>/dev/null | {compress} > {local}/backup.xbstream.zst"
        )
    out["MB on the wire"] = (local / "backup.xbstream.zst").stat().st_size / 1e6
    out["copy (scp)"] = sh(f"{scp} {local}/backup.xbstream.zst {sshd.user}@127.0.0.1:{remote}/")
    out["unpack"] = sh(f"{ssh} {shlex.quote(f'{decompress} < {remote}/backup.xbstream.zst | mbstream -x --parallel={parallel} -C {datadir}')}")
    out["prepare"] = sh(f"{ssh} {shlex.quote(f'mariabackup --prepare --target-dir={datadir} --use-memory={use_memory} 2>/dev/null')}")
    t1 = time.monotonic()
    replica.start(timeout=300)
    out["start"] = time.monotonic() - t1
    out["to started replica"] = time.monotonic() - t0
    out["_costs"] = component_costs(local / "backup.xbstream.zst", ssh, host, parallel)
    for d in (local, remote):
        subprocess.run(["rm", "-rf", str(d)], check=True)
    return out


def component_costs(stream_file: Path, ssh: str, host, parallel: int) -> dict[str, float]:
    """Seconds for the choices the rebuild stream makes, on the compressed stream itself: the taps'
    checksum (cksum vs sha256sum), the level on the wire (zstd -1 vs -3, decompression included in
    both), the cipher (aes128-gcm vs chacha20-poly1305), and a short command through the shared
    master connection vs a new one."""
    f = shlex.quote(str(stream_file))
    costs = {
        "cksum": sh(f"cksum < {f}"),
        "sha256sum": sh(f"sha256sum < {f}"),
        "zstd -d | zstd -1": sh(f"zstd -q -d -c < {f} | zstd -q -1 -T{parallel} -c > /dev/null"),
        "zstd -d | zstd -3": sh(f"zstd -q -d -c < {f} | zstd -q -3 -T{parallel} -c > /dev/null"),
    }
    for cipher in ("aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com"):
        costs[f"ssh {cipher.split('@')[0]}"] = sh(f"{ssh} -c {cipher} 'cat > /dev/null' < {f}")
    t0 = time.monotonic()
    for _ in range(5):
        host.run(["true"])
    costs["5 commands, shared master"] = time.monotonic() - t0
    costs["5 commands, new connections"] = sum(sh(f"{ssh} true") for _ in range(5))
    return costs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=1.0, help="source data size in GB (created once)")
    p.add_argument("--root", default=str(ROOT / ".bench" / "rebuild"), help="where the sandboxes live")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--compression", default=replica_rebuild.STREAM_COMPRESSION, help="codec for both methods (default: the rebuild's)")
    p.add_argument("--link-mb", type=float, default=110.0,
                   help="second round: both methods capped to this many MB/s on the wire (110: about 1 Gbit/s)")
    p.add_argument("--keep", action="store_true", help="leave the servers running afterwards")
    args = p.parse_args()
    if not sshd_sandbox.available():
        sys.exit("this bench starts an sshd on loopback: run it as root with openssh-server installed (make setup)")
    root = Path(args.root).resolve()
    source, replica, sshd = setup(root, args.gb)
    use_memory = min(default_use_memory(), 1 << 30)
    results = []
    try:
        with option_file(source.server(), ("client", "mariabackup")) as opt:  # warm-up: both read a cached datadir
            sh(f"mariabackup --defaults-extra-file={opt} --backup --stream=xbstream --datadir={source.datadir} "
               "--target-dir=/tmp 2>/dev/null > /dev/null")
        print(f"source datadir: {sum(f.stat().st_size for f in source.datadir.rglob('*') if f.is_file()) / 1e6:,.0f} MB; "
              f"{args.parallel} threads; {args.compression}; replica over ssh to 127.0.0.1:{sshd.port}", flush=True)
        for link in (0.0, args.link_mb):
            os.sync()  # each method starts with no dirty pages of the other's to write back
            ours = lastline_rebuild(args.parallel, use_memory, args.compression, link)
            os.sync()
            hand = by_hand(source, replica, sshd, root / "work", args.parallel, use_memory, args.compression, link)
            results.append((link, ours, hand))
    finally:
        sshd.stop()
        if not args.keep:
            replica.stop()
            source.stop()
    summary = []
    for link, ours, hand in results:
        where = f"a {link:g} MB/s link (both capped: pv -L / scp -l)" if link else "loopback, no cap"
        print(f"\n== {where}")
        print("lastline replica_rebuild (one SSH stream):")
        for k, v in ours.items():
            print(f"  {k:<22} {v:8.1f}{'' if k.startswith('MB') else ' s'}")
        print("backup to a local file + scp + unpack (by hand):")
        costs = hand.pop("_costs")
        for k, v in hand.items():
            print(f"  {k:<22} {v:8.1f}{'' if k.startswith('MB') else ' s'}")
        print(f"the stream's choices, on its {hand['MB on the wire']:.0f} MB:")
        for k, v in costs.items():
            print(f"  {k:<30} {v:6.2f} s")
        hand["costs"] = costs
        ratio = hand["to started replica"] / ours["to started replica"]
        summary.append(f"{where}: lastline {ours['to started replica']:.1f} s, file + copy + restore "
                       f"{hand['to started replica']:.1f} s -> {ratio:.2f}x")
    print("\nfirst byte read -> started replica (ratio: by hand / lastline):")
    for line in summary:
        print(f"  {line}")
    record = ROOT / "bench" / "results" / f"rebuild-{time.strftime('%Y%m%dT%H%M%S')}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"gb": args.gb, "parallel": args.parallel, "compression": args.compression,
                                  "rounds": [{"link_mb": link, "lastline": ours, "by_hand": hand} for link, ours, hand in results]},
                                 indent=1))
    print(f"record: {record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
