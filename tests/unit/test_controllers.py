"""The writing verbs and the running controllers (issue 28): every flux-plunger Lease of the
lease namespace read with one LIST (controller_lease.survey), which live one covers a release
(an expired or released Lease does not count; one whose scope cannot be read covers
everything), the per-release check on the executor's fresh read (Options.covered), the same
in release-fence and restore, the Lease of the controller `release-fence --stop-deployment`
stopped (verbs/stop.lease_of), and `--no-headers` refused where there is no header line.
The same against the real apiserver, with a serve process per shard: tests/apiserver/
test_shards.py."""
from __future__ import annotations

import datetime as dt

import pytest

from kubectl_flux_plunger import cli
from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.cli import errors, session
from kubectl_flux_plunger.kube.controller_lease import survey
from kubectl_flux_plunger.executor import Covered, Executor, Options, Result
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.verbs import release_fence as rf
from kubectl_flux_plunger.verbs import restore as restore_verb
from kubectl_flux_plunger.verbs import stop as stop_verb
from kubectl_flux_plunger.verbs.controller_check import LeaseFlags
from kubectl_flux_plunger.verbs.controller_check import check as controller_check

from . import builders as B

pytestmark = pytest.mark.unit

KEY = "sharding.fluxcd.io/key"
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
FRESH = "2026-12-01T11:59:58.000000Z"        # renewed 2 s before NOW
STALE = "2026-12-01T11:58:00.000000Z"        # 120 s before NOW


def lease_obj(name: str, annotations: dict | None = None, *, holder: str = "pod_1",
              renew: str = FRESH, duration: int = 15) -> dict:
    md: dict = {"name": name}
    if annotations is not None:
        md["annotations"] = annotations
    return {"metadata": md, "spec": {"holderIdentity": holder, "renewTime": renew,
                                     "leaseDurationSeconds": duration}}


def scoped(name: str, selector: str = "", namespace: str = "", **kw) -> dict:
    return lease_obj(name, {C.LEASE_SELECTOR_ANNOTATION: selector,
                            C.LEASE_NAMESPACE_ANNOTATION: namespace}, **kw)


class Leases:
    """list_cluster_leases, and list_leases / get_lease of a namespace (an item without a
    namespace is in every namespace); ``forbid_cluster``: the cluster-wide LIST is refused,
    ``forbid_list``: every LIST is."""

    def __init__(self, items=(), *, forbid_list=False, forbid_get=False, forbid_cluster=False):
        self.items = list(items)
        self.forbid_list, self.forbid_get = forbid_list, forbid_get
        self.forbid_cluster = forbid_cluster or forbid_list
        self.sent: list[tuple[str, str]] = []

    def list_cluster_leases(self):
        self.sent.append(("LIST", "*"))
        if self.forbid_cluster:
            raise KubeError(403, "Forbidden", "leases is forbidden at the cluster scope")
        return self.items

    def list_leases(self, namespace):
        self.sent.append(("LIST", namespace))
        if self.forbid_list:
            raise KubeError(403, "Forbidden", "leases is forbidden")
        return [i for i in self.items if i["metadata"].get("namespace", namespace) == namespace]

    def get_lease(self, namespace, name):
        self.sent.append(("GET", name))
        if self.forbid_get:
            raise KubeError(403, "Forbidden", f"leases {name!r} is forbidden")
        return next((i for i in self.items if i["metadata"]["name"] == name), None)


def release(name="x", ns="apps", **labels) -> dict:
    hr = B.hr(name, ns, conditions=[B.stuck_condition()], finalizers=[C.HELM_CONTROLLER_FINALIZER])
    hr["metadata"]["labels"] = labels
    return hr


# -- which Leases are flux-plunger's, and which cover what -----------------------------------

def test_one_list_finds_every_flux_plunger_lease():
    k = Leases([scoped("b.flux-plunger.cozystack.io", f"{KEY}=b"),
                lease_obj("helm-controller-leader-election"),           # not ours
                lease_obj("aa.flux-plunger.cozystack.io"),             # a shard's name
                lease_obj("custom-id"),                                 # only by --lease-name
                lease_obj(C.LEASE_NAME)])                               # the reference's
    found = survey(k, "fp", NOW, names=("custom-id",))
    assert k.sent == [("LIST", "*")]
    assert [c.name for c in found.leases] == [C.LEASE_NAME, "aa.flux-plunger.cozystack.io",
                                              "b.flux-plunger.cozystack.io", "custom-id"]
    assert not found.list_error
    without = survey(Leases(k.items), "fp", NOW)
    assert "custom-id" not in [c.name for c in without.leases]   # --lease-name only adds


def test_expired_and_released_leases_do_not_count():
    found = survey(Leases([scoped("a.flux-plunger.cozystack.io", f"{KEY}=a", renew=STALE),
                           scoped("b.flux-plunger.cozystack.io", f"{KEY}=b", holder=""),
                           scoped(C.LEASE_NAME, f"!{KEY}", renew=STALE, duration=1)]),
                   "fp", NOW)
    assert found.live() == []
    for labels in ({KEY: "a"}, {KEY: "b"}, {}):
        assert found.covering(release(**labels)) is None


def test_a_live_lease_covers_its_scope_and_one_without_a_readable_scope_covers_everything():
    found = survey(Leases([scoped("a.flux-plunger.cozystack.io", f"{KEY}=a"),
                           scoped("t.flux-plunger.cozystack.io", "", "team")]), "fp", NOW)
    assert found.covering(release(**{KEY: "a"})).name == "a.flux-plunger.cozystack.io"
    assert found.covering(release(ns="team")).name == "t.flux-plunger.cozystack.io"
    assert found.covering(release(**{KEY: "b"})) is None        # outside every live scope
    # the reference controller: its Lease records no scope
    ref = survey(Leases([lease_obj(C.LEASE_NAME)]), "fp", NOW)
    assert ref.covering(release(**{KEY: "b"})).name == C.LEASE_NAME
    assert "records no scope" in ref.covering(release()).deferral(NOW)
    # a selector that does not parse
    bad = survey(Leases([scoped("z.flux-plunger.cozystack.io", "k in (")]), "fp", NOW)
    assert bad.covering(release(**{KEY: "b"})) is not None
    assert "a selector that does not parse" in bad.leases[1].deferral(NOW)
    # a Lease that records watching everything says so
    everything = survey(Leases([scoped(C.LEASE_NAME)]), "fp", NOW)
    assert "(watching every release)" in everything.covering(release()).deferral(NOW)


def test_the_deferral_names_the_holder_the_lease_and_the_scope():
    found = survey(Leases([scoped("a.flux-plunger.cozystack.io", f"{KEY}=a", "apps")]),
                   "fp", NOW)
    words = found.covering(release(**{KEY: "a"})).deferral(NOW)
    assert words == (
        "left alone: flux-plunger controller pod_1 holds Lease fp/a.flux-plunger.cozystack.io "
        f"(running, last renewed 2s ago) (watching -n apps -l '{KEY}=a') and covers this "
        "release, so it may be recovering it right now; stop it or pass --force to act anyway")


def test_a_refused_list_falls_back_to_the_named_leases():
    k = Leases([lease_obj("custom-id")], forbid_list=True)
    found = survey(k, "fp", NOW, names=("custom-id",))
    assert k.sent == [("LIST", "*"), ("LIST", "fp"), ("GET", C.LEASE_NAME),
                      ("GET", "custom-id")]
    assert "forbidden" in found.list_error and not found.blind()
    assert [c.name for c in found.live()] == ["custom-id"]
    unreadable = survey(Leases(forbid_list=True, forbid_get=True), "fp", NOW)
    assert [c.name for c in unreadable.unreadable()] == [C.LEASE_NAME]
    assert unreadable.live() == [] and unreadable.blind()


def test_without_drops_the_named_leases():
    found = survey(Leases([scoped("a.flux-plunger.cozystack.io", f"{KEY}=a")]), "fp", NOW)
    assert found.without([("fp", "a.flux-plunger.cozystack.io")]).live() == []
    assert found.without([("other", "a.flux-plunger.cozystack.io")]).live() != []


# -- the executor: the fresh read that decides -------------------------------------------------

class Kube:
    """A client whose release reads answer ``reads`` in turn; a write fails the test."""

    dry_run = False
    watch_list = False
    request_timeout = 5.0

    def __init__(self, *reads):
        self.reads = list(reads)

    def get_hr(self, ns, name):
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    def __getattr__(self, name):
        pytest.fail(f"unexpected request: {name}")


def covered_by(**labels):
    def check(hr):
        mine = all((hr["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        return Covered("shard.flux-plunger.cozystack.io", "left alone: shard") if mine else None
    return check


def test_a_covered_fresh_read_is_left_to_the_controller():
    listed = release("x", KEY="free")
    fresh = release("x", **{KEY: "b"})        # relabelled into shard b since the LIST
    ex = Executor(Kube(fresh), options=Options(covered=covered_by(**{KEY: "b"})))
    out = ex.settle(listed)                    # the listed copy: re-read before acting
    assert (out.result, out.detail, out.controller) == (
        Result.DEFERRED, "left alone: shard", "shard.flux-plunger.cozystack.io")
    assert out.steps == [] and not out.failed
    named = ex.settle(fresh, fresh=True)       # a named read is the fresh read
    assert named.result == Result.DEFERRED and named.controller
    assert ex.reconcile("apps", "x").result == Result.DEFERRED


def test_a_decision_that_writes_nothing_is_not_deferred():
    healthy = B.hr("x", "apps", conditions=[B.ready_condition()])
    healthy["metadata"]["labels"] = {KEY: "b"}
    ex = Executor(Kube(healthy), options=Options(covered=covered_by(**{KEY: "b"})))
    assert ex.settle(healthy, fresh=True).result == Result.UNCHANGED
    assert ex.reconcile("apps", "x").result == Result.UNCHANGED


def test_after_a_clean_up_a_covered_re_read_ends_the_pass():
    from kubectl_flux_plunger.executor import Outcome

    held = B.hr("x", "apps", suspend=True, managed=[B.OURS], finalizers=[C.FENCE])
    now_covered = release("x", **{KEY: "b"})
    ex = Executor(Kube(now_covered), options=Options(covered=covered_by(**{KEY: "b"})))
    lifted = Outcome("apps", "x", Result.RELINQUISHED, "lifted")
    ex.apply_decision = lambda *a, **k: lifted       # the clean-up itself (a write)
    assert ex.settle(held, fresh=True) is lifted     # no second pass on the covered re-read


# -- release-fence and restore ---------------------------------------------------------------

def test_release_fence_leaves_a_covered_release_alone():
    fenced = B.hr("x", "apps", finalizers=[C.FENCE])
    fenced["metadata"]["labels"] = {KEY: "b"}
    r = rf.release_one(Kube(fenced), fenced, 5.0, covered=covered_by(**{KEY: "b"}))
    assert (r.released, r.detail, r.controller) == (
        False, "left alone: shard", "shard.flux-plunger.cozystack.io")
    assert rf.summary([r]) == "released 0 of 1 fenced HelmReleases, 0 without an uninstall"


def test_release_fence_checks_every_re_read_before_a_write():
    """The guarded patch's resourceVersion test failed (the release changed since the LIST):
    the re-read shows it relabelled into a shard's scope, and nothing is written on it."""
    listed = B.hr("x", "apps", suspend=True, managed=[B.OURS], finalizers=[C.FENCE])
    moved = B.hr("x", "apps", suspend=True, managed=[B.OURS], finalizers=[C.FENCE], rv="101")
    moved["metadata"]["labels"] = {KEY: "b"}

    class Racing(Kube):
        def json_patch_hr(self, ns, name, ops):
            from kubectl_flux_plunger.kube import GENERIC_422
            raise KubeError(422, "Invalid", GENERIC_422)   # a test op failed: it changed

    r = rf.release_one(Racing(moved), listed, 5.0, covered=covered_by(**{KEY: "b"}))
    assert not r.released and r.controller == "shard.flux-plunger.cozystack.io"


def test_restore_refuses_a_release_a_controller_covers():
    from kubectl_flux_plunger.executor import backup
    from kubectl_flux_plunger.core import storage

    secret = storage.make_storage_secret("x", "apps", 2, "deployed")
    doc = backup.document(secret, {"metadata": {"namespace": "apps", "name": "x"}}, "local")
    hr = B.hr("x", "apps", suspend=True, managed=[("kubectl", "Update", True)])
    hr["metadata"]["labels"] = {KEY: "b"}
    res = restore_verb.run(Kube(hr), doc, "b.json", covered=covered_by(**{KEY: "b"}))
    assert res.action == "refused" and res.controller == "shard.flux-plunger.cozystack.io"
    assert res.detail.endswith("(revision 2): left alone: shard")


# -- the Lease of the controller release-fence --stop-deployment stopped -----------------------

def deployment(*args: str, ns: str = "fp") -> dict:
    return {"metadata": {"name": "ctl", "namespace": ns}, "spec": {"template": {"spec": {
        "containers": [{"name": "sidecar", "args": ["--leader-election-id=not-this"]},
                       {"name": "manager", "args": list(args)}]}}}}


@pytest.mark.parametrize(("args", "lease"), [
    (("serve", "--leader-elect"), ("fp", C.LEASE_NAME)),                     # the reference's too
    (("serve", "--leader-elect", "--leader-election-id=s1.flux-plunger.cozystack.io"),
     ("fp", "s1.flux-plunger.cozystack.io")),
    (("serve", "--leader-elect=true", "--leader-election-id", "s2",
      "--leader-election-namespace", "leases"), ("leases", "s2")),
    (("serve",), None),                                                       # no leader election
    (("serve", "--leader-elect", "--leader-elect=false"), None),
])
def test_lease_of_a_controller_deployment(args, lease):
    assert stop_verb.lease_of(deployment(*args)) == lease


# -- the command line: one LIST before the reads, --force reads none, warnings ----------------

def _check(k, **kw):
    """The check (verbs/controller_check.py) as the command line says it: its warning
    lines, its refusal as one error line and exit 1."""
    kw.setdefault("force", False)
    found = controller_check(k, LeaseFlags("fp", kw.pop("lease_name", None), kw.pop("force")),
                             **kw)
    for line in found.warnings:
        errors.warn(line)
    if found.refusal:
        errors.fail(found.refusal)
    return found.covered


def _renewed_now() -> str:
    """A renewTime of just now (controller_check reads the Leases against the real clock)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_controller_check_reads_once_and_force_reads_nothing(capsys):
    k = Leases([scoped("b.flux-plunger.cozystack.io", f"{KEY}=b", renew=_renewed_now())])
    check = _check(k)
    assert k.sent == [("LIST", "*")]
    by = check(release(**{KEY: "b"}))
    assert by.lease == "b.flux-plunger.cozystack.io" and "pod_1" in by.detail
    assert check(release(**{KEY: "c"})) is None
    forced = Leases([scoped("b.flux-plunger.cozystack.io", f"{KEY}=b")])
    assert _check(forced, force=True) is None and forced.sent == []
    assert _check(Leases([scoped("a", renew=STALE)])) is None     # nothing live: no check
    assert capsys.readouterr().err == ""


def test_controller_check_ignores_the_stopped_controller():
    k = Leases([scoped(C.LEASE_NAME, f"!{KEY}", renew=_renewed_now()),
                scoped("b.flux-plunger.cozystack.io", f"{KEY}=b", renew=_renewed_now())])
    check = _check(k, stopped=(("fp", C.LEASE_NAME),))
    assert check(release()) is None                                 # the stopped one's scope
    assert check(release(**{KEY: "b"})) is not None                 # another shard's still counts


def test_controller_check_warns_when_it_cannot_list_or_read(capsys):
    k = Leases([lease_obj(C.LEASE_NAME, renew=_renewed_now())], forbid_list=True)
    check = _check(k, lease_name="custom")
    err = capsys.readouterr().err
    assert err == ("warning: cannot list the Leases of the cluster (leases is forbidden at the "
                   "cluster scope); looking for running flux-plunger controllers only in Lease "
                   f"fp/{C.LEASE_NAME}, fp/custom\n")
    assert k.sent == [("LIST", "*"), ("LIST", "fp"), ("GET", C.LEASE_NAME), ("GET", "custom")]
    assert check(release()) is not None                            # the GET found the default


def test_controller_check_falls_back_to_the_lease_and_release_namespaces(capsys):
    """Issue 36: no list on Leases cluster-wide (a namespace admin) — the LIST of the lease
    namespace and of the releases' own, one warning line; a live Lease there still counts."""
    shard = scoped("b.flux-plunger.cozystack.io", f"{KEY}=b", renew=_renewed_now())
    shard["metadata"]["namespace"] = "apps"
    k = Leases([shard], forbid_cluster=True)
    check = _check(k, namespaces=("apps", None))
    assert k.sent == [("LIST", "*"), ("LIST", "fp"), ("LIST", "apps")]
    assert capsys.readouterr().err == (
        "warning: cannot list the Leases of the cluster (leases is forbidden at the cluster "
        "scope); looking for running flux-plunger controllers only in namespace fp and "
        "namespace apps\n")
    assert check(release(**{KEY: "b"})).lease == "b.flux-plunger.cozystack.io"


def test_controller_check_refuses_when_no_lease_can_be_read(capsys):
    """Nothing readable at all: the verb cannot tell a controller's recovery from a crash
    leftover — one error line, exit 1, before anything is read that decides; --force acts."""
    k = Leases(forbid_list=True, forbid_get=True)
    with pytest.raises(SystemExit) as exc:
        _check(k, namespaces=("apps",))
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read any flux-plunger controller's Lease (leases is "
                          "forbidden at the cluster scope)") and err.count("\n") == 1, err
    assert "no HelmRelease was written" in err and "--force" in err
    assert _check(Leases(forbid_list=True, forbid_get=True), force=True) is None


def test_a_live_lease_in_another_namespace_covers_and_an_expired_one_does_not():
    """The cluster-wide survey: a controller leading in flux-system (no selector recorded)
    covers every release; the same Lease expired covers none; its name may repeat the
    contract's of the lease namespace without either hiding the other."""
    other = lease_obj(C.LEASE_NAME, {C.LEASE_SELECTOR_ANNOTATION: "",
                                     C.LEASE_NAMESPACE_ANNOTATION: ""})
    other["metadata"]["namespace"] = "flux-system"
    mine = lease_obj(C.LEASE_NAME, renew=STALE)
    mine["metadata"]["namespace"] = "fp"
    found = survey(Leases([mine, other]), "fp", NOW)
    assert [(c.namespace, c.name) for c in found.leases] == [("fp", C.LEASE_NAME),
                                                             ("flux-system", C.LEASE_NAME)]
    assert found.covering(release(ns="apps")).namespace == "flux-system"
    other["spec"]["renewTime"] = STALE
    assert survey(Leases([mine, other]), "fp", NOW).covering(release(ns="apps")) is None


# -- --no-headers where there is no header line ------------------------------------------------

@pytest.mark.parametrize("verb", [["recover", "-A"], ["resume-owned", "-A"],
                                  ["release-fence", "-A"], ["restore", "backup.json"]])
def test_no_headers_is_a_usage_error_on_the_verbs_without_a_table_header(capsys, monkeypatch,
                                                                         verb):
    monkeypatch.setattr(session, "connect", lambda *a, **kw: pytest.fail("connected"))
    code = cli.main([*verb, "--no-headers"])
    err = capsys.readouterr().err
    assert code == cli.Exit.USAGE
    assert err.startswith(f"error: --no-headers: {verb[0]} prints one line per HelmRelease "
                          "and no header line"), err
    assert f"See 'kubectl flux-plunger {verb[0]} --help' for usage." in err


# -- recover's summary counts what it says it counts (issue 36) ------------------------------

def test_recovers_summary_counts_a_deferred_release_that_was_not_stuck_apart():
    """A leftover suspension a running controller covers is deferred, but it was not stuck:
    "recovered 0 of 0 stuck HelmReleases, 1 deferred" counted it among the stuck."""
    from types import SimpleNamespace

    from kubectl_flux_plunger.cli.table import summary
    from kubectl_flux_plunger.core.plan import Row

    def o(row, result, failed=False):
        return SimpleNamespace(row=row, result=result, failed=failed, steps=())

    held = o(Row.LIVE_SUSPENDED_OWNED, Result.DEFERRED)
    assert summary("recover", [held], "none") == (
        "recovered 0 of 0 stuck HelmReleases, 0 deferred, 0 skipped, 0 failed; of the "
        "HelmReleases not stuck, 1 deferred")
    outcomes = [o(Row.LIVE_STUCK, Result.RECOVERED), o(Row.LIVE_STUCK, Result.DEFERRED),
                o(Row.LIVE_STUCK, Result.FAILED, failed=True), held,
                o(Row.LIVE_FENCED, Result.FAILED, failed=True),
                o(Row.LIVE_SUSPENDED_OWNED, Result.RELINQUISHED)]
    assert summary("recover", outcomes, "none") == (
        "recovered 1 of 3 stuck HelmReleases, 1 deferred, 0 skipped, 1 failed; of the "
        "HelmReleases not stuck, 1 deferred, 1 failed")
    assert summary("recover", outcomes[:1], "none") == (
        "recovered 1 of 1 stuck HelmReleases, 0 deferred, 0 skipped, 0 failed")
