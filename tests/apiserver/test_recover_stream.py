"""`recover` as a long run: results stream as each release finishes (in listing order), and
Ctrl-C (SIGINT to the real process) stops it safely — the first one aborts the recoveries
in flight through the relinquish path and exits 130 saying what was left, the second exits
at once naming what may be left and the command that lifts it (which then works)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from testplane.signals import default_sigint
from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.detect import is_fenced, is_suspended
from kubectl_flux_plunger.core.ownership import owns_suspend
from testplane.cluster import SimulatedHelmController, eventually

from .conftest import stuck_release

pytestmark = pytest.mark.apiserver


def start(plane, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["KUBECONFIG"] = str(plane.kubeconfig)
    return subprocess.Popen([sys.executable, "-m", "kubectl_flux_plunger", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, preexec_fn=default_sigint)


def held_by_us(cluster, ns, name="demo") -> bool:
    hr = cluster.get(ns, name)
    return hr is not None and is_suspended(hr) and owns_suspend(hr)


def free_of_us(cluster, ns, name="demo") -> bool:
    hr = cluster.get(ns, name)
    return hr is not None and not is_suspended(hr) and not is_fenced(hr)


def test_results_stream_in_listing_order_while_later_releases_still_run(plane, cluster):
    """The release listed first is acknowledged at once; the second waits for a handshake
    that never comes (no helm-controller there): the first line arrives while the process
    still runs, and the second follows when its handshake times out."""
    label = f"stream-{time.monotonic_ns()}"
    quick, slow = cluster.namespace("a-quick"), cluster.namespace("b-slow")
    for n in (quick, slow):
        stuck_release(cluster, n, labels={"run": label})
    with SimulatedHelmController(cluster, quick):
        proc = start(plane, "recover", "-A", "-l", f"run={label}", "--handshake-timeout", "8s")
        try:
            first = proc.stdout.readline()
            still_running = proc.poll() is None
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert f"-n {quick} helmrelease.helm.toolkit.fluxcd.io/demo recovered" in first, \
        (first, rest, err)
    assert still_running, "the first result must be printed before the run ends"
    assert f"-n {slow} helmrelease.helm.toolkit.fluxcd.io/demo deferred" in rest.splitlines()[0]
    assert proc.returncode == 1
    assert free_of_us(cluster, slow)
    assert len(cluster.secret_names(slow, "demo")) == 2


def test_first_ctrl_c_aborts_in_flight_recoveries_and_exits_130(plane, cluster):
    """One release in its handshake, two not started (concurrency 1): SIGINT. The one in
    flight is relinquished with its Secret intact, the others are reported not done."""
    label = f"int-{time.monotonic_ns()}"
    nss = [cluster.namespace(p) for p in ("a-int", "b-int", "c-int")]
    for n in nss:
        stuck_release(cluster, n, labels={"run": label})
    proc = start(plane, "recover", "-A", "-l", f"run={label}", "--concurrency", "1",
                 "--handshake-timeout", "60s")
    try:
        eventually(lambda: held_by_us(cluster, nss[0]), 30, "the first release acquired")
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert took < 10, f"Ctrl-C took {took:.1f}s to take effect"
    assert "interrupted: starting no more HelmReleases" in err
    assert "interrupted: 3 HelmRelease(s) not done; run the same command again" in err, err
    assert "nothing is left suspended or fenced by flux-plunger" in err, err
    assert f"-n {nss[0]} helmrelease.helm.toolkit.fluxcd.io/demo deferred" in out
    for n in nss[1:]:
        assert (f"-n {n} helmrelease.helm.toolkit.fluxcd.io/demo deferred: not started: "
                "the run was interrupted") in out
    for n in nss:
        assert free_of_us(cluster, n), n
        assert len(cluster.secret_names(n, "demo")) == 2
        assert C.PROCESSED_ANNOTATION not in (cluster.get(n, "demo")["metadata"]
                                              .get("annotations") or {})


def test_second_ctrl_c_exits_at_once_naming_what_may_be_left(plane, cluster, cli):
    """A handshake that never comes and two SIGINTs: the process exits at once (the
    in-flight recovery never reaches its relinquish), naming the release and the
    resume-owned command; that command lifts it."""
    ns = cluster.namespace("twice")
    stuck_release(cluster, ns)
    proc = start(plane, "recover", "-n", ns, "--handshake-timeout", "60s")
    try:
        eventually(lambda: held_by_us(cluster, ns), 30, "the release acquired")
        proc.send_signal(signal.SIGINT)
        # two signals sent at once may arrive as one: the second after the first is handled
        seen = ""
        while "interrupted:" not in seen:
            line = proc.stderr.readline()
            assert line, f"stderr ended before the first Ctrl-C was handled: {seen!r}"
            seen += line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        err = seen + err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted again: exiting now" in err, err
    assert f"-n {ns} helmrelease.helm.toolkit.fluxcd.io/demo" in err
    hint = f"resume-owned -n {ns} demo"
    assert hint in err
    assert held_by_us(cluster, ns), "exited before the relinquish: the release is left held"
    res = cli(*hint.split())
    assert res.code == 0, res
    assert free_of_us(cluster, ns)
    assert len(cluster.secret_names(ns, "demo")) == 2
