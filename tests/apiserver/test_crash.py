"""A process killed between any two requests of a recovery (SIGKILL-like: no finally, no
cleanup) never leaves a deleted revision that should have stayed, a suspension behind, or a
fence no command can lift: the next pass of the same decision table finishes the job."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.ownership import owns_suspend

from .conftest import stuck_release

KILLER = textwrap.dedent("""
    import os, sys
    from kubectl_flux_plunger.report.events import Recorder
    from kubectl_flux_plunger.executor import Executor, Options
    from kubectl_flux_plunger.kube import Kube
    kubeconfig, ns, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    k = Kube.from_kubeconfig(kubeconfig)
    sent = []
    def hook(verb, path):
        sent.append(verb)
        if len(sent) == kill_at:
            os._exit(137)          # dies before request N goes out: no finally runs
    k.before_request = hook
    out = Executor(k, Recorder(k, enabled=False), options=Options(handshake_timeout=10)).reconcile(ns, "demo")
    print(out.result, len(sent))
""")


@pytest.mark.parametrize("kill_at", range(1, 8))
def test_killed_before_request_n_then_the_next_pass_finishes(plane, cluster, ns, hc, cli,
                                                            kill_at):
    stuck_release(cluster, ns)
    proc = subprocess.run([sys.executable, "-c", KILLER, str(plane.kubeconfig), ns, str(kill_at)],
                          capture_output=True, text=True, timeout=60)
    if kill_at <= 6:         # a recovery takes at least 6 requests: it always dies here
        assert proc.returncode == 137, proc.stdout + proc.stderr
    elif proc.returncode == 0:   # 6 requests: nothing was left to kill at the 7th
        assert proc.stdout.split() == ["recovered", "6"], proc
    else:                    # a status write made the record retry (more requests)
        assert proc.returncode == 137, proc.stdout + proc.stderr
    hr = cluster.get(ns, "demo")
    names = cluster.secret_names(ns, "demo")
    assert "sh.helm.release.v1.demo.v1" in names                  # never the healthy one
    if "sh.helm.release.v1.demo.v2" not in names:                   # deleted only after record
        assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"

    res = cli("recover", "-n", ns)                                  # the next pass
    assert res.code == 0, res
    hr = cluster.get(ns, "demo")
    assert names == ["sh.helm.release.v1.demo.v1"] or \
        cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert hr["spec"].get("suspend") is None and not owns_suspend(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]
