"""``python -m testplane.plane`` (README: a control plane to poke around in) stops the
kube-apiserver and etcd it started when it is told to stop — Ctrl-C, SIGTERM, or SIGHUP (a
closed terminal) — instead of exiting and leaving them running (issue 28)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testplane.signals import default_sigint
from testplane.plane import wait_for

ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid``: pid -> command name (from /proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(pid) and not fields.get("State", "").startswith("Z"):
            out[int(entry)] = fields.get("Name", "").strip()
    return out


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state       # a zombie runs nothing


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_the_plane_stops_its_children_on_a_signal(sig, tmp_path):
    out = tmp_path / "plane.out"
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "testplane.plane"], cwd=ROOT,
                                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=default_sigint)
    kids: dict[int, str] = {}
    try:
        wait_for(lambda: "export KUBECONFIG=" in out.read_text(), 120, "the plane to be ready")
        kids = children(proc.pid)
        assert sorted(kids.values()) == ["etcd", "kube-apiserver"], kids
        proc.send_signal(sig)
        assert proc.wait(60) == 0, out.read_text()
        wait_for(lambda: all(gone(pid) for pid in kids), 30, f"{kids} to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in kids:                   # never leave one behind, whatever failed
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
