"""flux-plunger installed the way docs/INSTALL.md tells Flux users to (issue 31): Flux's
source-controller pulls the release's chart from the session's OCI registry through an
OCIRepository with ``verify.provider: cosign`` and the session's public key in a Secret,
and helm-controller installs it from there (a HelmRelease with ``chartRef``).

1. the signed chart verifies (SourceVerified=True for its digest), helm-controller installs
   it, and the flux-plunger it runs recovers a release broken as the e2e tier breaks them;
2. an unsigned chart pushed under another tag is refused: its OCIRepository reports the
   verification failed (SourceVerified=False, VerificationError) and has no artifact, the
   HelmRelease that refers to it stays SourceNotReady, and nothing of it is installed;
3. a chart signed only in cosign's simple-signing format (the .sig older source-controllers
   read; the release signs in both formats) verifies too.

The pods reach the registry at the Docker bridge's gateway over plain HTTP
(``spec.insecure: true``); the signatures are cosign v3 bundles (OCI referrers, the tag
fallback on this registry), verified offline with the key (no transparency log)."""
from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import Cluster
from testplane.helmctl import break_release, is_ready, ready, request_reconcile
from testplane.kind import FLUX_NS, KindFlux, wait_until

from .conftest import (COSIGN_PASSWORD, GRACE, PLUNGER_NS, Plunger, _record, fenced,
                       install_release, skip_reason, stuck, suspended)

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())

KEY_SECRET = "flux-plunger-cosign"
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
UNSIGNED_NS = "flux-plunger-unsigned"


def oci_repository(name: str, url: str, tag: str) -> dict:
    return {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": FLUX_NS},
            "spec": {"interval": "10m", "url": url, "ref": {"tag": tag},
                     "insecure": True,   # the session's registry speaks plain HTTP
                     "layerSelector": {"mediaType": CHART_LAYER, "operation": "copy"},
                     "verify": {"provider": "cosign", "secretRef": {"name": KEY_SECRET}}}}


def plunger_release(name: str, target: str, source: str) -> dict:
    return {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": FLUX_NS},
            "spec": {"interval": "10m", "releaseName": name, "targetNamespace": target,
                     "chartRef": {"kind": "OCIRepository", "name": source},
                     "install": {"createNamespace": True, "timeout": "5m"},
                     "values": {"shutdownGracePeriodSeconds": GRACE}}}


def condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})


def helm_storage(kind_flux: KindFlux, ns: str, name: str) -> list[dict]:
    found = kind_flux.get_json("-n", ns, "secrets", "-l", f"owner=helm,name={name}")
    return (found or {}).get("items", [])


def _push_repackaged(kind_flux: KindFlux, tmp_path: Path, version: str) -> str:
    """The release's chart repackaged as ``version`` (another digest, nothing signs it),
    pushed to the session's registry under that tag; its digest."""
    release = kind_flux.release  # type: ignore[attr-defined]
    with tarfile.open(release["chart_file"]) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    kind_flux.helm("package", str(tmp_path / "src" / "flux-plunger"), "--version", version,
                   "--destination", str(tmp_path))
    pushed = kind_flux.helm("push", str(tmp_path / f"flux-plunger-{version}.tgz"),
                            f"oci://{release['registry']}/charts", "--plain-http")
    digest = next(line.split()[1] for line in (pushed.stdout + pushed.stderr).splitlines()
                  if line.startswith("Digest:"))
    assert digest != release["chart_digest"]
    return digest


@pytest.fixture(scope="module")
def flux_plunger(kind_flux: KindFlux, plunger_image: str) -> Iterator[Plunger]:
    """The signed chart through a verifying OCIRepository, installed by helm-controller."""
    release = kind_flux.release  # type: ignore[attr-defined]
    started = time.monotonic()
    wait_until(lambda: (kind_flux.get_json("namespace", PLUNGER_NS) or {}).get(
                   "status", {}).get("phase", "Active") == "Active", 180,
               f"namespace {PLUNGER_NS} to finish terminating")
    pub = Path(release["pub"]).read_text()
    kind_flux.apply([
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": KEY_SECRET, "namespace": FLUX_NS}, "stringData": {"cosign.pub": pub}},
        oci_repository("flux-plunger", release["chart"], release["version"]),
        plunger_release("flux-plunger", PLUNGER_NS, "flux-plunger")])
    hr = lambda: kind_flux.get_json("-n", FLUX_NS, "helmrelease", "flux-plunger")  # noqa: E731
    wait_until(lambda: is_ready(hr()), 360, "helm-controller to install flux-plunger from the "
               "verified OCIRepository",
               detail=lambda: json.dumps({"helmrelease": (hr() or {}).get("status"),
                                          "ocirepository": (kind_flux.get_json(
                                              "-n", FLUX_NS, "ocirepository", "flux-plunger")
                                              or {}).get("status")}, indent=1)[-3000:]
               + f"\nsource-controller log:\n{kind_flux.flux_logs('source-controller')[-2000:]}")
    plunger = Plunger(kind_flux)
    plunger.leader_pod(timeout=180)
    _record("signed_install", {"verify_and_install_s": round(time.monotonic() - started, 1)})
    yield plunger
    kind_flux.kubectl("-n", FLUX_NS, "delete", "helmrelease", "flux-plunger", "--wait=false",
                      check=False)
    wait_until(lambda: hr() is None, 420, "helm-controller to uninstall flux-plunger (its "
               "pre-delete hook included)", interval=3,
               detail=lambda: json.dumps((hr() or {}).get("status"), indent=1)[-2000:])
    kind_flux.kubectl("-n", FLUX_NS, "delete", "ocirepository", "flux-plunger",
                      "--ignore-not-found", check=False)


def test_the_signed_chart_verifies_installs_and_recovers_a_stuck_release(
        kind_flux: KindFlux, kcluster: Cluster, flux_plunger: Plunger) -> None:
    release = kind_flux.release  # type: ignore[attr-defined]
    repo = kind_flux.get_json("-n", FLUX_NS, "ocirepository", "flux-plunger")
    verified = condition(repo, "SourceVerified")
    assert verified.get("status") == "True", repo["status"]
    assert release["chart_digest"] in verified["message"], verified
    assert repo["status"]["artifact"]["revision"] == f"{release['version']}@{release['chart_digest']}"
    hr = kind_flux.get_json("-n", FLUX_NS, "helmrelease", "flux-plunger")
    history = hr["status"]["history"][0]
    # helm-controller names the installed chart by the digest it verified: X.Y.Z+<12 hex>
    short = release["chart_digest"].split(":", 1)[1][:12]
    assert (history["chartName"], history["chartVersion"]) == ("flux-plunger",
                                                               f"{release['version']}+{short}")
    # its Helm storage: in the HelmRelease's namespace (helm-controller's storageNamespace default)
    assert [s["metadata"]["labels"]["status"]
            for s in helm_storage(kind_flux, FLUX_NS, "flux-plunger")] == ["deployed"]
    for pod in flux_plunger.pods():
        assert pod["status"]["containerStatuses"][0]["imageID"].endswith(f"@{release['digest']}")

    ns = kcluster.namespace("ksig")
    install_release(kind_flux, kcluster, ns)
    break_release(kcluster.kube, ns, "demo")
    request_reconcile(kcluster.kube, ns, "demo")

    def recovered() -> dict | None:
        got = kcluster.get(ns, "demo")
        if (got and (got["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION)
                and is_ready(got) and not suspended(got) and not fenced(got)):
            return got
        return None
    got = wait_until(recovered, 240, f"{ns}/demo recovered by the Flux-installed flux-plunger",
                     detail=lambda: json.dumps(kcluster.get(ns, "demo"), indent=1)[-2500:])
    assert ready(got)[1] in ("InstallSucceeded", "UpgradeSucceeded"), ready(got)
    assert not stuck(got)
    assert [s["metadata"]["labels"]["status"]
            for s in kcluster.kube.list_secrets(ns, "owner=helm,name=demo")] == ["deployed"]
    leader = flux_plunger.leader_pod()
    records = wait_until(lambda: [r for r in flux_plunger.log_records(leader)
                                  if r.get("release") == f"{ns}/demo"
                                  and r.get("result") == "recovered"], 30,
                         f"a 'recovered' log record for {ns}/demo")
    assert records


def test_an_unsigned_chart_is_refused_and_nothing_is_installed(
        kind_flux: KindFlux, flux_plunger: Plunger, tmp_path: Path) -> None:
    """The same chart repackaged as version X.Y.Z-unsigned (another digest, never signed),
    pushed to the same repository under that tag."""
    release = kind_flux.release  # type: ignore[attr-defined]
    unsigned = f"{release['version']}-unsigned"
    _push_repackaged(kind_flux, tmp_path, unsigned)
    name = "flux-plunger-unsigned"
    kind_flux.apply([oci_repository(name, release["chart"], unsigned),
                     plunger_release(name, UNSIGNED_NS, name)])
    try:
        repo = lambda: kind_flux.get_json("-n", FLUX_NS, "ocirepository", name)  # noqa: E731
        wait_until(lambda: condition(repo(), "SourceVerified").get("status") == "False", 120,
                   f"source-controller to refuse {release['chart']}:{unsigned}",
                   detail=lambda: json.dumps((repo() or {}).get("status"), indent=1)[-2500:])
        got = repo()
        verified = condition(got, "SourceVerified")
        assert verified["reason"] == "VerificationError", verified
        assert "failed to verify the signature using provider 'cosign'" in verified["message"]
        assert "no matching signatures" in verified["message"], verified
        assert condition(got, "Ready").get("status") == "False", got["status"]
        assert not got["status"].get("artifact"), got["status"]
        hr = lambda: kind_flux.get_json("-n", FLUX_NS, "helmrelease", name)  # noqa: E731
        wait_until(lambda: condition(hr(), "Ready").get("reason") == "SourceNotReady", 60,
                   f"HelmRelease {FLUX_NS}/{name} to wait for its refused source",
                   detail=lambda: json.dumps((hr() or {}).get("status"), indent=1)[-2000:])
        status = hr()["status"]
        assert condition(hr(), "Ready")["status"] == "False"
        assert not status.get("history"), status
        assert kind_flux.get_json("namespace", UNSIGNED_NS) is None
        storage = kind_flux.get_json("secrets", "-A", "-l", f"owner=helm,name={name}")
        assert storage["items"] == [], [s["metadata"] for s in storage["items"]]
        deployments = kind_flux.get_json("deployments", "-A", "-l",
                                         f"app.kubernetes.io/instance={name}")
        assert deployments["items"] == []
    finally:
        kind_flux.kubectl("-n", FLUX_NS, "delete", f"helmrelease/{name}", f"ocirepository/{name}",
                          "--ignore-not-found", check=False)


def test_a_chart_signed_only_in_the_simple_signing_format_verifies(
        kind_flux: KindFlux, flux_plunger: Plunger, tmp_path: Path) -> None:
    """The release signs in both of cosign's formats; source-controller v1.7 (cosign v2's
    library) reads only the simple-signing .sig.  A chart with that signature alone verifies
    here too (source-controller v1.9.3 falls back to it when it finds no bundle)."""
    from testplane import binaries

    release = kind_flux.release  # type: ignore[attr-defined]
    version = f"{release['version']}-sig"
    digest = _push_repackaged(kind_flux, tmp_path, version)
    ref = f"{release['chart'].removeprefix('oci://')}@{digest}"
    proc = subprocess.run([str(binaries.ensure("cosign")), "sign", "--yes", "--new-bundle-format=false",
                           "--key", str(release["key"]), "--tlog-upload=false",
                           "--use-signing-config=false", "--allow-insecure-registry",
                           "--allow-http-registry", ref], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path), "COSIGN_PASSWORD": COSIGN_PASSWORD})
    assert proc.returncode == 0, proc.stderr
    name = "flux-plunger-sig"
    kind_flux.apply([oci_repository(name, release["chart"], version)])
    try:
        repo = lambda: kind_flux.get_json("-n", FLUX_NS, "ocirepository", name)  # noqa: E731
        wait_until(lambda: condition(repo(), "SourceVerified").get("status") in ("True", "False"),
                   120, f"source-controller to verify {release['chart']}:{version}",
                   detail=lambda: json.dumps((repo() or {}).get("status"), indent=1)[-2500:])
        verified = condition(repo(), "SourceVerified")
        assert verified["status"] == "True", verified
        assert digest in verified["message"], verified
        wait_until(lambda: (repo() or {}).get("status", {}).get("artifact"), 60,
                   f"the artifact of {FLUX_NS}/{name}")
    finally:
        kind_flux.kubectl("-n", FLUX_NS, "delete", f"ocirepository/{name}", "--ignore-not-found",
                          check=False)
