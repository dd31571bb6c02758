"""Helpers shared by the ``serve`` tests (no tests here): run ``serve`` as a real process
against the test control plane, read its logs, probes, metrics and the Lease."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testplane.signals import default_sigint
from kubectl_flux_plunger.core import constants as C
from testplane.plane import free_port

from .conftest import hold, stuck_release  # noqa: F401 - shared with the serve tests

# Fast timings: every duration the controller has is a flag.
FAST = ("--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms",
        "--handshake-timeout", "15s", "--shutdown-stop-timeout", "5s",
        "--shutdown-drain-timeout", "10s", "--fence-recheck-interval", "500ms")


class Serve:
    """One ``kubectl flux-plunger serve`` process."""

    def __init__(self, plane, log_dir: Path, name: str, args: tuple[str, ...]):
        self.name = name
        self.metrics_port, self.probe_port = free_port(), free_port()
        self.log_path = log_dir / f"{name}.log"
        argv = [sys.executable, "-m", "kubectl_flux_plunger", "serve",
                "--kubeconfig", str(plane.kubeconfig),
                "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}", *args]
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        with open(self.log_path, "wb") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         preexec_fn=default_sigint)
        self.exited_at: float | None = None

    # -- process -----------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig=signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    # -- output ------------------------------------------------------------------

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, pattern: str) -> bool:
        return re.search(pattern, self.logs()) is not None

    @property
    def identity(self) -> str:
        m = re.search(r"identity[=\"': ]+([^\s\"',}]+_[0-9a-f-]{36})", self.logs())
        assert m, f"{self.name}: no identity logged yet:\n{self.logs()}"
        return m.group(1)

    # -- endpoints ---------------------------------------------------------------

    def http(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def ready(self) -> bool:
        try:
            return self.http(self.probe_port, "/readyz")[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        code, body = self.http(self.metrics_port, "/metrics")
        assert code == 200, body
        return body

    def metric(self, name: str, **labels) -> float | None:
        """The value of one sample (labels must match exactly those given; the install's
        ``lease`` label, on every sample, only when given)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
            if not m or m.group(1) != name:
                continue
            pairs = (m.group(2) or "").split(",") if m.group(2) else []
            if "lease" not in labels:
                pairs = [p for p in pairs if not p.startswith("lease=")]
            if ",".join(sorted(pairs)) == want:
                return float(m.group(3))
        return None

    def leads(self) -> bool:
        try:
            return self.metric("flux_plunger_leader") == 1.0
        except OSError:
            return False


@pytest.fixture
def serve(plane, tmp_path, request):
    """``serve(*args, name=...)`` starts a serve process; every one is killed at teardown
    and its log shown when the test failed."""
    started: list[Serve] = []

    def _start(*args: str, name: str | None = None) -> Serve:
        s = Serve(plane, tmp_path, name or f"serve{len(started)}", tuple(args))
        started.append(s)
        return s
    yield _start
    for s in started:
        s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for s in started:
            sys.stderr.write(f"\n--- {s.name} log ---\n{s.logs()}\n")


# -- cluster helpers --------------------------------------------------------------

def lease(kube, namespace: str) -> dict | None:
    return kube.get_lease(namespace, C.LEASE_NAME)


def holder(kube, namespace: str) -> str:
    got = lease(kube, namespace)
    return ((got or {}).get("spec") or {}).get("holderIdentity") or ""


def stuck(cluster, ns: str, name: str, *, labels: dict | None = None,
          revisions=((1, "superseded"), (2, "uninstalling"))) -> dict:
    """A stuck HelmRelease whose newest Helm revision is ``uninstalling``, none deployed."""
    return stuck_release(cluster, ns, name, revisions=revisions, labels=labels)


def recovered(cluster, ns: str, name: str) -> bool:
    """Secret v2 deleted, suspension and fence gone, annotation = 2."""
    hr = cluster.get(ns, name)
    return (f"sh.helm.release.v1.{name}.v2" not in cluster.secret_names(ns, name)
            and hr is not None and not hr["spec"].get("suspend")
            and C.FENCE not in (hr["metadata"].get("finalizers") or [])
            and (hr["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION) == "2")


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
