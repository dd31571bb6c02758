"""``serve`` refuses flag values that cannot work, at start-up, with ``error: …`` and exit 2."""
from __future__ import annotations

import pytest
import yaml

from testplane.cluster import eventually

from .test_serve_support import serve  # noqa: F401

BAD = [
    (("--shutdown-drain-timeout", "0"), "--shutdown-drain-timeout must be positive"),
    (("--shutdown-drain-timeout", "-5s"), "invalid duration"),
    (("--shutdown-stop-timeout", "0s"), "--shutdown-stop-timeout must be positive"),
    (("--handshake-timeout", "0"), "--handshake-timeout must be positive"),
    (("--lease-duration", "10s", "--renew-deadline", "10s"), "must be shorter than --lease-duration"),
    (("--renew-deadline", "3s", "--retry-period", "3s"), "times 1.2"),
    (("--termination-grace-period", "60s"), "exceeds --termination-grace-period (60s)"),
    (("--termination-grace-period", "74s"), "exceeds --termination-grace-period (74s)"),
    (("--lease-duration", "soon"), "invalid duration"),
    (("--workers", "0"), "--workers"),
    (("--metrics-bind-address", "8080"), "--metrics-bind-address"),
    (("--health-probe-bind-address", "host:port"), "port must be a number"),
    (("--log-format", "xml"), "--log-format"),
    (("-n", ""), "--namespace must not be empty"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_impossible_flags_are_refused(cli, ns, args, message):
    r = cli("serve", "--leader-election-namespace", ns, *args)
    assert r.code == 2, r
    assert r.err.startswith("error: ") and message in r.err, r


def test_a_grace_period_that_fits_is_accepted(cluster, ns, serve):  # noqa: F811
    """10s stop + 60s drain + 5s margin = 75s."""
    s = serve("-n", ns, "--leader-election-namespace", ns, "--termination-grace-period", "75s")
    eventually(s.ready, 30, "ready")
    assert s.alive()


def test_no_lease_namespace_is_refused(plane, tmp_path, cli, ns, serve):  # noqa: F811
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    del cfg["contexts"][0]["context"]["namespace"]
    path = tmp_path / "no-namespace.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    r = cli("serve", kubeconfig=path)
    assert r.code == 2, r
    assert "--leader-election-namespace" in r.err, r
    assert "kubeconfig context sets no namespace" in r.err, r
    # without leader election no Lease namespace is needed
    s = serve("--kubeconfig", str(path), "--no-leader-elect", "-n", ns)
    eventually(s.ready, 30, "ready without a Lease namespace")
