"""Edges of the small verbs against a scripted fake API: ``version`` (best effort, each part
unknown with why), ``--stop-deployment`` (selector rendering, retries bounded by the window,
pods that would not go or could not be listed) and ``restore`` (every refusal, the dry runs,
a create that races another).  No cluster, no sleeps: time is faked."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.executor import backup
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.verbs import restore, stop, version

from . import builders as B

pytestmark = pytest.mark.unit


class FakeKube:
    """A stand-in for :class:`Kube`: ``routes`` maps a method name (``get_deployment``) or a
    ``(verb, path)`` pair of :meth:`request` to a list of answers, used in order (the last
    one repeats); an exception answer is raised."""

    request_timeout = None
    dry_run = False

    def __init__(self, routes):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.calls: list[tuple] = []
        self.stats = K.Stats()

    def _answer(self, key, *args, **kwargs):
        self.calls.append((key, args, kwargs))
        answers = self.routes[key]
        a = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(a, Exception):
            raise a
        return a

    def request(self, verb, method, path, **kwargs):
        return self._answer((verb, path), **kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._answer(name, *args, **kwargs)

    def close(self):
        pass


def err(status, message="m", **body):
    return K.kube_error(status, "Reason", message, body or None)


MISSING = err(404, "not found", details={"name": "x", "kind": "secrets"})


# -- version ----------------------------------------------------------------------------------

def _deployment(*images):
    return {"spec": {"template": {"spec": {"containers": [{"image": i} for i in images]}}}}


def test_version_reads_the_helm_controller_tag_from_its_images():
    kube = FakeKube({
        "server_version": [{"gitVersion": "v1.37.2"}],
        "list_deployments_any": [[
            _deployment("ghcr.io/fluxcd/helm-controller:v1.6.4", "sidecar:1"),
            _deployment("ghcr.io/fluxcd/helm-controller:v1.6.4@sha256:abc"),
            _deployment("registry:5000/helm-controller"),          # no tag: the image itself
        ]],
    })
    assert version.server(kube) == {
        "serverVersion": "v1.37.2",
        "helmControllerVersion": "registry:5000/helm-controller,v1.6.4",
    }
    assert kube.calls[1][1] == (version.HELM_CONTROLLER_SELECTOR,)
    assert version.client()["clientVersion"]


def test_version_says_why_a_part_is_unknown():
    kube = FakeKube({"server_version": [err(401, "Unauthorized")]})
    assert version.server(kube) == {"serverVersion": "unknown (Unauthorized)"}
    kube = FakeKube({"server_version": [{}], "list_deployments_any": [err(403, "no")]})
    assert version.server(kube) == {"serverVersion": "unknown",
                                    "helmControllerVersion": "unknown (Reason)"}
    kube = FakeKube({"server_version": [{"gitVersion": "v1"}], "list_deployments_any": [[]]})
    assert version.server(kube)["helmControllerVersion"] == "not found"


# -- stop -------------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(stop.time, "monotonic", c.monotonic)
    monkeypatch.setattr(stop.time, "sleep", c.sleep)
    return c


def test_selector_of_renders_every_operator():
    dep = {"spec": {"selector": {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["x", "y"]},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "has", "operator": "Exists"},
            {"key": "not", "operator": "DoesNotExist"},
            {"key": "odd", "operator": "Unknown"},
        ]}}}
    assert stop.selector_of(dep) == "a=1,b=2,tier in (x,y),env notin (dev),has,!not"
    assert stop.selector_of({}) == ""


def test_stop_retries_reads_within_the_window_then_gives_up(clock):
    kube = FakeKube({"get_deployment": [err(503, "unavailable")]})
    with pytest.raises(stop.StopError) as e:
        stop.stop(kube, "fp", "ctl", wait=5, window=5)
    assert str(e.value) == "could not read Deployment fp/ctl: unavailable"
    assert clock.slept == [stop.RETRY_SLEEP] * 3        # 0, 2, 4 < 5; the try at 6 is the last
    assert len(kube.calls) == 4


def test_stop_that_cannot_scale_touches_nothing_else(clock):
    dep = {"spec": {"selector": {"matchLabels": {"app": "fp"}}}}
    kube = FakeKube({"get_deployment": [dep], "scale_deployment": [err(403, "forbidden")]})
    with pytest.raises(stop.StopError, match="^could not scale Deployment fp/ctl to zero: forb"):
        stop.stop(kube, "fp", "ctl", wait=5, window=0)
    assert [c[0] for c in kube.calls] == ["get_deployment", "scale_deployment"]


def test_stop_of_a_missing_deployment_and_a_server_dry_run(clock):
    assert stop.stop(FakeKube({"get_deployment": [None]}), "fp", "ctl", wait=5, window=5) \
        == stop.Stopped(found=False)
    dep = {"spec": {"selector": {"matchLabels": {"app": "fp"}}}}
    kube = FakeKube({"get_deployment": [err(500, "x"), dep], "scale_deployment": [{}]})
    assert stop.stop(kube, "fp", "ctl", wait=5, window=5, dry_run=True) == stop.Stopped(True)
    assert "list_pods" not in [c[0] for c in kube.calls]    # a dry run waits for nothing


def test_stop_waits_for_pods_to_go(clock):
    dep = {"spec": {"selector": {"matchLabels": {"app": "fp"}}}}
    pod = {"metadata": {"name": "fp-1"}}
    kube = FakeKube({"get_deployment": [dep], "scale_deployment": [{}],
                     "list_pods": [[pod], err(503, "x"), []]})
    assert stop.stop(kube, "fp", "ctl", wait=10, window=5, poll=1) == \
        stop.Stopped(found=True, pods_left=[], selector="app=fp")
    assert clock.slept == [1, 1]


def test_pods_that_stay_or_cannot_be_listed_are_reported(clock):
    pod = {"metadata": {"name": "fp-1"}}
    kube = FakeKube({"list_pods": [[pod]]})
    assert stop.wait_for_pods(kube, "fp", "app=fp", 3, poll=1) == \
        stop.Stopped(found=True, pods_left=["pod/fp-1"], selector="app=fp")
    kube = FakeKube({"list_pods": [err(403, "no")]})
    assert stop.wait_for_pods(kube, "fp", "app=fp", 2, poll=1) == \
        stop.Stopped(found=True, pods_unknown=True, selector="app=fp")


# -- restore ----------------------------------------------------------------------------------

SECRETS = "/api/v1/namespaces/apps/secrets"
SECRET = SECRETS + "/sh.helm.release.v1.my-app.v2"


def _doc(cluster="local"):
    secret = storage.make_storage_secret("my-app", "apps", 2, "deployed")
    return backup.document(secret, {"metadata": {"namespace": "apps", "name": "my-app"}},
                           cluster)


def suspended_by(manager):
    return B.hr("my-app", "apps", suspend=True, managed=[(manager, "Apply", True)])


def test_restore_creates_the_revision_of_a_release_its_caller_suspended():
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [MISSING],
                     ("CREATE", SECRETS): [{}]})
    res = restore.run(kube, _doc(), "file b.json")
    assert res.ok and res.action == "created" and res.cluster == "local"
    assert res.line() == ("created Secret apps/sh.helm.release.v1.my-app.v2 (revision 2 of "
                          "release my-app) from file b.json")
    assert res.as_dict()["revision"] == 2
    create = kube.calls[-1]
    assert create[2]["query"] is None
    assert backup.BACKUP_OF not in (create[2]["body"]["metadata"].get("annotations") or {})


@pytest.mark.parametrize(("hr", "force", "why"), [
    (None, False, "HelmRelease apps/my-app does not exist; pass --force to restore the "
                  "revision anyway"),
    (B.hr("my-app", "apps"), False, "HelmRelease apps/my-app is not suspended; suspend it "
                                   "first (flux suspend helmrelease) or pass --force"),
    (suspended_by("flux-plunger"), False, "HelmRelease apps/my-app is suspended by "
     "flux-plunger (a recovery is in flight); suspend it yourself or pass --force"),
])
def test_restore_refuses_while_helm_controller_may_act(hr, force, why):
    res = restore.run(FakeKube({"get_hr": [hr]}), _doc(), "f", force=force)
    assert not res.ok and res.action == "refused"
    assert res.detail == f"not restored Secret apps/sh.helm.release.v1.my-app.v2 (revision 2): {why}"


def test_forced_restore_without_the_release_goes_to_the_local_cluster_only():
    kube = FakeKube({"get_hr": [None], ("GET", SECRET): [MISSING], ("CREATE", SECRETS): [{}]})
    assert restore.run(kube, _doc(), "f", force=True).action == "created"
    res = restore.run(FakeKube({"get_hr": [None]}), _doc("https://tenant:6443"), "f",
                      force=True)
    assert res.detail.endswith(" in cluster https://tenant:6443: HelmRelease apps/my-app does "
                               "not exist, so its remote cluster cannot be reached")


def test_restore_never_overwrites():
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [{}]})
    assert restore.run(kube, _doc(), "f").detail.endswith(
        ": it already exists; restore never overwrites")
    # created by someone else between the look and the create
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [MISSING],
                     ("CREATE", SECRETS): [err(409, "already exists")]})
    res = restore.run(kube, _doc(), "f")
    assert not res.ok and res.detail.endswith(": it already exists; restore never overwrites")


def test_restore_raises_what_is_not_a_refusal():
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [err(403, "no")]})
    with pytest.raises(K.Forbidden):
        restore.run(kube, _doc(), "f")
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [MISSING],
                     ("CREATE", SECRETS): [err(422, "invalid")]})
    with pytest.raises(K.Invalid):
        restore.run(kube, _doc(), "f")


@pytest.mark.parametrize(("dry_run", "action", "creates"), [
    ("client", "would-create", False), ("server", "would-create", True)])
def test_restore_dry_runs(dry_run, action, creates):
    kube = FakeKube({"get_hr": [suspended_by("kubectl")], ("GET", SECRET): [MISSING],
                     ("CREATE", SECRETS): [{}]})
    res = restore.run(kube, _doc(), "f", dry_run=dry_run)
    assert res.ok and res.action == action and res.detail.startswith("would create ")
    sent = [c for c in kube.calls if c[0] == ("CREATE", SECRETS)]
    assert bool(sent) == creates
    if creates:
        assert sent[0][2]["query"] == {"dryRun": "All"}


def test_restore_to_a_cluster_the_release_no_longer_uses_is_refused():
    # the backup came from a remote cluster; the release's storage is local now
    kube = FakeKube({"get_hr": [suspended_by("kubectl")]})
    res = restore.run(kube, _doc("https://tenant:6443"), "f")
    assert res.detail.endswith("the backup comes from cluster https://tenant:6443, but the "
                               "HelmRelease's storage is now in cluster local")


def test_restore_whose_remote_kubeconfig_cannot_be_read_is_refused():
    hr = suspended_by("kubectl")
    hr["spec"]["kubeConfig"] = {"secretRef": {"name": "kc"}}
    kube = FakeKube({"get_hr": [hr],
                     ("GET", "/api/v1/namespaces/apps/secrets/kc"): [MISSING]})
    res = restore.run(kube, _doc("https://tenant:6443"), "f", force=True)
    assert not res.ok and res.detail.endswith(": kubeconfig Secret apps/kc not found")
