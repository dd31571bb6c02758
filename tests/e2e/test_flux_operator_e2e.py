"""Issue 38 with the real helm-controller: the Flux Operator Web UI's Resume lands while a
recovery holds the release.  The recovery stops before any delete (deferred, storage
intact, nothing of flux-plunger's left); helm-controller acts on the UI's requested
reconcile, finds the release still stuck and says so at the new generation; the next pass
recovers it afresh and helm-controller installs it — the operator's resume was never
reversed (spec.suspend stays unset from the click on)."""
from __future__ import annotations

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import detect
from kubectl_flux_plunger.report.events import Recorder
from kubectl_flux_plunger.executor import Executor, Options
from testplane.cluster import eventually
from testplane.fluxoperator import REQUESTED_AT, FluxOperator
from testplane.helmctl import ready

from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture

from .conftest import wait_ready
from .test_recover_e2e import make_stuck


def test_a_web_ui_resume_mid_recovery_then_a_fresh_recovery(installed, cluster, ns, plane):
    make_stuck(installed, cluster, ns)
    storage = cluster.secret_names(ns, "demo")
    k = plane.kube()
    ex = Executor(k, Recorder(k), options=Options(handshake_timeout=30))
    ui = FluxOperator(cluster)
    seen: list[dict] = []
    apply_hr = ex.kube.apply_hr

    def apply_then_click_resume(body, **kwargs):
        out = apply_hr(body, **kwargs)
        if not seen and (body.get("spec") or {}).get("suspend") is True:
            seen.append(cluster.get(ns, "demo"))
            seen.append(ui.web_resume(ns, "demo"))
        return out
    ex.kube.apply_hr = apply_then_click_resume
    try:
        out = ex.reconcile(ns, "demo")
        assert seen and out.result == "deferred", out
        held, resumed = seen
        assert (held["metadata"].get("annotations") or {})[C.SUSPENDED_BY_ANNOTATION] == \
            "flux-plunger"
        assert cluster.secret_names(ns, "demo") == storage            # storage intact
        hr = cluster.get(ns, "demo")
        assert "suspend" not in hr["spec"] and C.FENCE not in hr["metadata"]["finalizers"]
        assert C.SUSPENDED_BY_ANNOTATION not in hr["metadata"]["annotations"]
        assert REQUESTED_AT in hr["metadata"]["annotations"]
        # helm-controller reconciles the resumed generation: still stuck, now at that generation
        gen = resumed["metadata"]["generation"]

        def failed_again():
            cur = cluster.get(ns, "demo")
            return (cur["metadata"]["generation"] == gen and detect.is_stuck(cur)
                    and detect.attempted_since_generation(cur)
                    and ready(cur) and ready(cur)[0] == "False")
        eventually(failed_again, 60, "helm-controller to fail again at the resumed generation")
        again = ex.reconcile(ns, "demo")
        assert again.result == "recovered", again
        wait_ready(cluster, ns)
        hr = cluster.get(ns, "demo")
        assert "suspend" not in hr["spec"] and C.FENCE not in hr["metadata"]["finalizers"]
        assert C.SUSPENDED_BY_ANNOTATION not in hr["metadata"]["annotations"]
        assert not [e for e in hr["metadata"]["managedFields"]
                    if e["manager"] == C.FIELD_MANAGER]
    finally:
        k.close()


def test_serve_defers_on_a_web_ui_resume_and_recovers_the_release_afresh(
        installed, cluster, ns, serve, helm_controller):  # noqa: F811
    """serve holds the release (helm-controller paused: its handshake cannot come) and the
    UI shows "Suspended by flux-plunger"; alice clicks Resume.  serve's pass ends deferred
    and counted so, storage untouched; once helm-controller runs again the release, still
    stuck, is recovered by a later pass and installed — nothing of flux-plunger's stays."""
    make_stuck(installed, cluster, ns)
    storage = cluster.secret_names(ns, "demo")
    with helm_controller.paused():
        s = serve("-n", ns, "--no-leader-elect", *FAST)

        def held() -> bool:
            hr = cluster.get(ns, "demo")
            return (hr["spec"].get("suspend") is True
                    and (hr["metadata"].get("annotations") or {}).get(
                        C.SUSPENDED_BY_ANNOTATION) == "flux-plunger")
        eventually(held, 30, "serve holding the release, Suspended by flux-plunger")
        FluxOperator(cluster).web_resume(ns, "demo")
        eventually(lambda: (s.metric("flux_plunger_recoveries_total", result="deferred")
                            or 0) >= 1, 30, "serve's pass to end deferred")
        assert cluster.secret_names(ns, "demo") == storage          # no handshake: no delete
    wait_ready(cluster, ns, timeout=120)
    hr = cluster.get(ns, "demo")
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "1"
    assert "suspend" not in hr["spec"] and C.FENCE not in hr["metadata"]["finalizers"]
    assert C.SUSPENDED_BY_ANNOTATION not in hr["metadata"]["annotations"]
    eventually(lambda: (s.metric("flux_plunger_recoveries_total", result="recovered")
                        or 0) >= 1, 20, "the fresh recovery to be counted")
