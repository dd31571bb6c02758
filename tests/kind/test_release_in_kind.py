"""The kind tier runs the release: the controller's pods run the image hack/release.py built,
pulled by the node's containerd by digest from the session's distribution registry (no
`kind load`), from the chart `helm upgrade --install oci://…` took from that registry."""
from __future__ import annotations

from .conftest import PLUNGER_NS, RELEASE_REGISTRY, RELEASE_REPO, Plunger


def test_controller_runs_the_release_image_pulled_by_digest(helm_plunger: Plunger) -> None:
    release = helm_plunger.kind_flux.release  # type: ignore[attr-defined]
    digest = release["digest"]
    pods = helm_plunger.pods()
    assert pods, f"no flux-plunger pods in {PLUNGER_NS}"
    for pod in pods:
        [container] = pod["spec"]["containers"]
        assert container["image"] == (f"{RELEASE_REGISTRY}/{RELEASE_REPO}:v{release['version']}"
                                      f"@{digest}")
        [status] = pod["status"]["containerStatuses"]
        assert status["imageID"].endswith(f"@{digest}"), status["imageID"]
    chart = helm_plunger.kind_flux.helm("list", "-n", PLUNGER_NS, "-o", "json").stdout
    assert f'"chart":"flux-plunger-{release["version"]}"' in chart.replace(" ", "")
