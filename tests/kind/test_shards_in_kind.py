"""Two chart installs as two shards in kind (issue 18): `helm install` of the chart twice in
one namespace, `shard=sa` and `shard=sb`, both lead on their own Leases; shard b holds a
recovery in flight (helm-controller stopped, so its acknowledgement never comes) while
`helm uninstall` of shard a runs the real pre-delete hook Job: nothing of shard b's is
released — its suspension and fence stay, the hook's report does not name its release — and
once helm-controller is back shard b finishes the recovery."""
from __future__ import annotations

import json
import subprocess

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import ownership
from testplane.cluster import Cluster
from testplane.helmctl import break_release, is_ready, request_reconcile
from testplane.kind import FLUX_NS, KindFlux, Setup, wait_until

from .conftest import (GRACE, PLUNGER_NS, Plunger, fenced, install_release, pod_ready,
                       scale, skip_reason, stuck, suspended, verified_chart)

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())

KEY = "sharding.fluxcd.io/key"


class Shard(Plunger):
    """One shard's install: release flux-plunger-<shard>, its pods, its own Lease."""

    def __init__(self, kind_flux: KindFlux, shard: str):
        super().__init__(kind_flux, selector=f"app.kubernetes.io/instance=flux-plunger-{shard}",
                         service=f"flux-plunger-{shard}")
        self.shard = shard
        self.release = f"flux-plunger-{shard}"
        self.lease_name = f"{self.release}.flux-plunger.cozystack.io"

    def lease(self) -> dict | None:
        return self.kind_flux.get_json("-n", self.namespace, "lease", self.lease_name)

    def leading_pod(self, timeout: float = 180) -> str:
        def found() -> str | None:
            holder = self.holder()
            for p in self.pods():
                if holder.startswith(p["metadata"]["name"] + "_") and pod_ready(p):
                    return str(p["metadata"]["name"])
            return None
        return str(wait_until(found, timeout, f"{self.release} to lead on {self.lease_name}",
                              detail=lambda: self.kind_flux.describe("pod", self.namespace,
                                                                      self.selector)))

    def scale(self, replicas: int, timeout: float = 150) -> None:
        scale(self.kind_flux, self.namespace, self.release, replicas, self.selector, timeout)

    def install(self, image: str, *extra: str) -> None:
        """The release's chart from the session's OCI registry (as conftest.helm_install
        installs it: by the digest its signature verified, the image pinned by digest), as
        this shard's release."""
        repo, _, tag = image.rpartition(":")
        registry, _, repository = repo.partition("/")
        self.kind_flux.helm("upgrade", "--install", self.release, verified_chart(self.kind_flux),
                            "--plain-http", "-n", PLUNGER_NS,
                            "--create-namespace", "--set", f"image.registry={registry}",
                            "--set", f"image.repository={repository}",
                            "--set", f"image.tag={tag}", "--set",
                            f"shutdownGracePeriodSeconds={GRACE}", "--set", f"shard={self.shard}",
                            *extra)

    def uninstall(self, check: bool = True) -> subprocess.CompletedProcess:
        return self.kind_flux.helm("uninstall", self.release, "-n", PLUNGER_NS, "--timeout", "5m",
                                   check=check, timeout=400)

    def installed(self) -> bool:
        return self.kind_flux.helm("status", self.release, "-n", PLUNGER_NS,
                                   check=False).returncode == 0


def test_uninstalling_one_shard_leaves_the_other_shards_recovery_in_flight_alone(
        kind_flux: KindFlux, kcluster: Cluster, plunger_image: str, kind_setup: Setup) -> None:
    a, b = Shard(kind_flux, "sa"), Shard(kind_flux, "sb")
    restored = False
    try:
        # shard b waits for the acknowledgement as long as this test needs
        b.install(plunger_image, "--set-json", 'extraArgs=["--handshake-timeout=600s"]')
        a.install(plunger_image)
        a.leading_pod()
        b.leading_pod()
        assert a.holder() != b.holder()
        ns = kcluster.namespace("kshard")
        install_release(kind_flux, kcluster, ns, "brel")
        kind_flux.kubectl("-n", ns, "label", "helmrelease", "brel", f"{KEY}={b.shard}")
        # stuck while shard b is stopped, then helm-controller stopped: shard b, back,
        # acquires and waits for an acknowledgement that does not come
        b.scale(0)
        break_release(kcluster.kube, ns, "brel")
        request_reconcile(kcluster.kube, ns, "brel")
        wait_until(lambda: stuck(kcluster.get(ns, "brel")), 180, f"{ns}/brel stuck")
        scale(kind_flux, FLUX_NS, "helm-controller", 0, "app=helm-controller")
        b.scale(1)
        b.leading_pod()

        def held() -> bool:
            hr = kcluster.get(ns, "brel")
            return suspended(hr) and fenced(hr) and ownership.owns_suspend(hr)
        wait_until(held, 120, f"shard b to suspend and fence {ns}/brel")
        before = kcluster.get(ns, "brel")["metadata"]["resourceVersion"]
        # uninstall shard a: its real pre-delete hook Job
        a.uninstall()
        report = kind_flux.logs(PLUNGER_NS, f"job/{a.release}-uninstall-cleanup")
        assert f"scaled Deployment {PLUNGER_NS}/{a.release} to zero" in report, report
        assert "brel" not in report, report
        assert "released 0 of 0 fenced HelmReleases" in report, report
        assert kind_flux.get_json("-n", PLUNGER_NS, "deployment", a.release) is None
        hr = kcluster.get(ns, "brel")
        assert held() and hr["metadata"]["resourceVersion"] == before, hr
        assert b.pods() and b.holder()   # shard b still runs and leads
        # helm-controller back: shard b finishes its recovery
        scale(kind_flux, FLUX_NS, "helm-controller", 1, "app=helm-controller")
        restored = True

        def recovered() -> bool:
            hr = kcluster.get(ns, "brel")
            return bool(hr and (hr["metadata"].get("annotations") or {}).get(
                C.PROCESSED_ANNOTATION) and is_ready(hr) and not suspended(hr)
                and not fenced(hr))
        wait_until(recovered, 240, f"shard b to finish recovering {ns}/brel",
                   detail=lambda: json.dumps(kcluster.get(ns, "brel"), indent=1)[-2500:])
    finally:
        if not restored:
            scale(kind_flux, FLUX_NS, "helm-controller", 1, "app=helm-controller")
        for s in (a, b):
            if s.installed():
                s.uninstall(check=False)
