"""The benches' peak-memory sampler (lastline_dev.peaks) reads a process as the kernel keeps it."""
from __future__ import annotations

import os
import subprocess
import sys

from lastline_dev.peaks import SessionPeaks, _sample


def test_a_sample_is_the_kernels_peak_title_and_parent():
    # a child that holds 64 MiB, then frees it and waits: its peak (VmHWM) stays, its RSS falls
    code = "import sys; b = bytearray(64 << 20); b[::4096] = b'x' * (len(b) // 4096); del b; sys.stdout.write('ok\\n'); sys.stdout.flush(); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code, "marker-arg"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout and child.stdout.readline() == b"ok\n"
        seen = _sample(child.pid)
        assert seen is not None
        assert seen.hwm_mb >= 64, seen
        assert seen.ppid == os.getpid()
        assert seen.title.endswith("marker-arg") and sys.executable in seen.title
        with open(f"/proc/{child.pid}/stat") as fh:
            assert seen.started == int(fh.read().rsplit(")", 1)[1].split()[19])
    finally:
        child.kill()
        child.wait()
    assert _sample(child.pid) is None  # gone
    kernel = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _kernel_thread(pid)]
    assert kernel, "no kernel thread visible in /proc (a pid namespace?)"
    assert _sample(kernel[0]) is None  # a kernel thread has no peak


def _kernel_thread(pid: int) -> bool:
    """kthreadd and what it starts (its pid's children): the processes without a memory of their own."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            status = fh.read()
    except OSError:
        return False
    return "VmHWM" not in status and ("\nPPid:\t2\n" in status or "Name:\tkthreadd\n" in status)


def test_the_sampler_sees_a_process_of_its_session_only():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    assert child.stdout and child.stdout.readline() == b"up\n"  # its interpreter loaded: past exec's first pages
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             start_new_session=True)
    peaks = SessionPeaks(child.pid, every=0.05).start()
    try:
        for _ in range(200):
            if child.pid in peaks.seen:
                break
            peaks._stop.wait(0.05)
    finally:
        peaks.stop()
        for proc in (child, other):
            proc.kill()
            proc.wait()
    assert child.pid in peaks.seen and other.pid not in peaks.seen
    assert peaks.seen[child.pid].hwm_mb > 1
