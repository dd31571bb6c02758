"""The sweep of ``release-fence`` (verbs/fence_sweep.py) with every step it composes faked:
the stop of the controller, the running-controller check, the wait for uninstalls, the
release itself and the wait for a controller pod that did not go.  What each step is handed
(the flags, the Lease not counted, the deadline left), what the caller is told through the
hooks, and what the :class:`Swept` result says.  No cluster: the reads are scripted.

tests/unit/test_verb_runs.py has the first look at the sweep; the command line renders it
(tests/unit/test_cli.py)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.selector import parse
from kubectl_flux_plunger.executor import Executor
from kubectl_flux_plunger.verbs import fence_sweep, stop
from kubectl_flux_plunger.verbs import release_fence as rf
from kubectl_flux_plunger.verbs.controller_check import ControllerCheck, LeaseFlags
from kubectl_flux_plunger.verbs.fence_sweep import SweepHooks, SweepOptions, Swept
from kubectl_flux_plunger.verbs.select import Selection

from . import builders as B

pytestmark = pytest.mark.unit

APPS = Selection(namespace="apps")
CTL = ("fp", "ctl")


def fenced(name: str, namespace: str = "apps") -> dict:
    return B.hr(name, namespace, finalizers=[constants.FENCE])


def plain(name: str, namespace: str = "apps") -> dict:
    return B.hr(name, namespace)


def freed(name: str, namespace: str = "apps") -> rf.FenceResult:
    return rf.FenceResult(namespace, name, True, False, "")


class Reads:
    """The reads of a selection: ``list_hrs`` answers ``lists`` in order, ``get_hr`` by name."""

    request_timeout = None

    def __init__(self, *lists, named=None) -> None:
        self.lists = [list(x) for x in lists]
        self.named = named or {}
        self.calls: list[tuple] = []

    def list_hrs(self, namespace, selector):
        self.calls.append(("LIST", namespace, selector))
        return self.lists.pop(0)

    def get_hr(self, namespace, name):
        self.calls.append(("GET", namespace, name))
        return self.named.get(name)


class World:
    """Every step the sweep composes, faked; ``log`` has each, in order, with what it was
    handed.  ``now`` is the sweep's ``time.monotonic()``; a step moves it by its cost."""

    def __init__(self, monkeypatch, *, stopped: stop.Stopped | None = None,
                 check: ControllerCheck | None = None, waited=None, released=None) -> None:
        self.now = 1000.0
        self.log: list[tuple] = []
        self.stopped = stopped or stop.Stopped(found=True)
        self.check = check or ControllerCheck()
        self.waited = waited  # (still fenced names, results) of the wait for uninstalls
        self.released = released  # name -> released, for the release; default: all
        self.cost: dict[str, float] = {}
        self.executor: Executor | None = None
        self.handed: list[tuple[str, object]] = []  # (step, the client it was handed)
        monkeypatch.setattr(fence_sweep, "time", self)
        monkeypatch.setattr(stop, "stop", self._stop)
        monkeypatch.setattr(stop, "wait_for_pods", self._wait_for_pods)
        monkeypatch.setattr(fence_sweep, "controller_check", self._check)
        monkeypatch.setattr(rf, "wait_uninstalls", self._wait_uninstalls)
        monkeypatch.setattr(rf, "run", self._run)

    def monotonic(self) -> float:
        return self.now

    def _spend(self, step: str) -> None:
        self.now += self.cost.get(step, 0.0)

    def _stop(self, kube, namespace, name, *, wait, window, dry_run=False):
        self.handed.append(("stop", kube))
        self.log.append(("stop", namespace, name, wait, window, dry_run))
        self._spend("stop")
        return self.stopped

    def _wait_for_pods(self, kube, namespace, selector, wait):
        self.handed.append(("wait_for_pods", kube))
        self.log.append(("wait_for_pods", namespace, selector, wait))
        return stop.Stopped(found=True)

    def _check(self, kube, lease, *, stopped=(), namespaces=()):
        self.handed.append(("check", kube))
        self.log.append(("check", lease, stopped, namespaces))
        self._spend("check")
        return self.check

    def _wait_uninstalls(self, executor, releases, timeout):
        self.executor = executor
        self.handed.append(("wait_uninstalls", executor.kube))
        names = [hr["metadata"]["name"] for hr in releases]
        self.log.append(("wait_uninstalls", names, timeout))
        still, results = self.waited or ([], [])
        return [hr for hr in releases if hr["metadata"]["name"] in still], results

    def _run(self, kube, releases, **kw):
        self.handed.append(("run", kube))
        names = [hr["metadata"]["name"] for hr in releases]
        self.log.append(("run", names, kw))
        return [
            rf.FenceResult(hr["metadata"]["namespace"], hr["metadata"]["name"],
                           (self.released or {}).get(hr["metadata"]["name"], True), False, "")
            for hr in releases
        ]

    def steps(self) -> list[str]:
        return [entry[0] for entry in self.log]


class Told:
    """The hooks, recording what the caller is told, in order."""

    def __init__(self, covered=None, notifier="the notifier") -> None:
        self.said: list[tuple] = []
        self._covered = covered
        self._notifier = notifier

    def hooks(self, *, with_covered: bool = False) -> SweepHooks:
        def covered(leases):
            self.said.append(("covered", leases))
            return self._covered

        def notifier():
            self.said.append(("notifier",))
            return self._notifier

        return SweepHooks(
            covered=covered if with_covered else None,
            stopped=lambda ref, s: self.said.append(("stopped", ref, s)),
            warned=lambda line: self.said.append(("warned", line)),
            missing=lambda line: self.said.append(("missing", line)),
            notifier=notifier,
        )


def run_kw(world: World) -> dict:
    (kw,) = [entry[2] for entry in world.log if entry[0] == "run"]
    return kw


# -- without a stop -------------------------------------------------------------------------


def test_without_a_stop_the_check_is_read_and_only_the_fenced_are_released(monkeypatch):
    world = World(monkeypatch)
    told = Told()
    lease = LeaseFlags(namespace="fp", name="mine")
    kube = Reads([fenced("a"), plain("b"), fenced("c")])
    swept = fence_sweep.sweep(kube, APPS, SweepOptions(lease=lease), told.hooks())
    assert world.steps() == ["check", "run"]
    assert world.log[0] == ("check", lease, (), ("apps",))
    assert world.log[1][1] == ["a", "c"]
    assert run_kw(world) == {"window": 60.0, "deadline": None,
                             "concurrency": rf.DEFAULT_CONCURRENCY, "selector": None,
                             "covered": None}
    assert told.said == []
    assert swept == Swept(results=[freed("a"), freed("c")])
    assert swept.ok


def test_the_release_is_handed_the_flags_the_selector_and_the_check(monkeypatch):
    def covers(hr):
        return None

    world = World(monkeypatch, check=ControllerCheck(covered=covers))
    selection = Selection("apps", selector="app=web")
    kube = Reads([fenced("a")])
    opts = SweepOptions(retry_window=7, concurrency=3)
    fence_sweep.sweep(kube, selection, opts, Told().hooks())
    assert run_kw(world) == {"window": 7, "deadline": None, "concurrency": 3,
                             "selector": parse("app=web"), "covered": covers}
    assert kube.calls == [("LIST", "apps", "app=web")]


def test_the_check_is_asked_of_the_releases_own_namespace(monkeypatch):
    world = World(monkeypatch)
    fence_sweep.sweep(Reads([]), Selection(None, all_namespaces=True), SweepOptions(),
                      Told().hooks())
    assert world.log[0] == ("check", LeaseFlags(), (), (None,))


def test_the_checks_warnings_are_told_in_order(monkeypatch):
    World(monkeypatch, check=ControllerCheck(warnings=("first", "second")))
    told = Told()
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(), told.hooks())
    assert told.said == [("warned", "first"), ("warned", "second")]


def test_a_refusal_reads_and_releases_nothing(monkeypatch):
    world = World(monkeypatch, check=ControllerCheck(refusal="cannot read any Lease"))
    told = Told()
    kube = Reads([fenced("a")])
    swept = fence_sweep.sweep(kube, Selection("apps", names=("a", "gone")),
                              SweepOptions(wait_uninstall=True), told.hooks())
    assert swept == Swept(refusal="cannot read any Lease")
    assert kube.calls == [] and world.steps() == ["check"] and told.said == []


def test_a_callers_check_replaces_the_lease_survey(monkeypatch):
    def covers(hr):
        return None

    world = World(monkeypatch, check=ControllerCheck(warnings=("not told",)))
    told = Told(covered=covers)
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(), told.hooks(with_covered=True))
    assert told.said == [("covered", ())]
    assert world.steps() == ["run"]
    assert run_kw(world)["covered"] is covers


def test_missing_names_are_told_and_make_the_sweep_not_ok(monkeypatch):
    world = World(monkeypatch)
    told = Told()
    kube = Reads(named={"a": fenced("a"), "b": plain("b")})
    swept = fence_sweep.sweep(kube, Selection("apps", names=("a", "gone", "b")),
                              SweepOptions(), told.hooks())
    line = 'helmreleases.helm.toolkit.fluxcd.io "gone" not found in namespace "apps"'
    assert told.said == [("missing", line)]
    assert swept.missing == [line] and swept.results == [freed("a")]
    assert world.log[-1][1] == ["a"]
    assert not swept.ok


# -- the result -----------------------------------------------------------------------------


def test_the_sweep_is_ok_only_when_every_release_was_released_and_none_missing():
    assert Swept().ok
    assert Swept(results=[freed("a"), freed("b")]).ok
    assert not Swept(results=[freed("a"), rf.FenceResult("apps", "b", False, False, "")]).ok
    assert not Swept(results=[freed("a")], missing=["gone"]).ok
    assert not Swept(missing=["gone"]).ok


# -- a client dry run -----------------------------------------------------------------------


def test_a_client_dry_run_plans_the_fenced_of_every_namespace_and_does_nothing(monkeypatch):
    world = World(monkeypatch)
    told = Told()
    kube = Reads([fenced("a", "ops"), plain("b", "apps"), fenced("c", "apps")])
    swept = fence_sweep.sweep(kube, Selection(None, all_namespaces=True),
                              SweepOptions(dry_run="client", wait_uninstall=True),
                              told.hooks(with_covered=True))
    assert swept == Swept(would_release=[("apps", "c"), ("ops", "a")])
    assert world.log == [] and told.said == []


def test_a_client_dry_run_with_a_stop_says_it_would_stop(monkeypatch):
    world = World(monkeypatch)
    told = Told()
    swept = fence_sweep.sweep(Reads([fenced("a")]), APPS,
                              SweepOptions(dry_run="client", stop_deployment=CTL), told.hooks())
    assert told.said == [("stopped", CTL, None)]
    assert world.log == []
    assert swept.would_release == [("apps", "a")]


# -- the stop -------------------------------------------------------------------------------


@pytest.mark.parametrize(("dry_run", "sent_dry"), [("none", False), ("server", True)])
def test_the_stop_is_handed_its_timeout_window_and_dry_run(monkeypatch, dry_run, sent_dry):
    world = World(monkeypatch)
    told = Told()
    opts = SweepOptions(dry_run=dry_run, stop_deployment=CTL, stop_timeout=9, retry_window=7)
    fence_sweep.sweep(Reads([fenced("a")]), APPS, opts, told.hooks())
    assert world.log[0] == ("stop", "fp", "ctl", 9, 7, sent_dry)
    assert told.said == [("stopped", CTL, world.stopped)]
    assert world.steps() == ["stop", "check", "run"]


def test_the_stopped_controllers_lease_is_not_counted(monkeypatch):
    world = World(monkeypatch, stopped=stop.Stopped(found=True, lease=("fp", "flux-plunger")))
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(stop_deployment=CTL),
                      Told().hooks())
    assert world.log[1] == ("check", LeaseFlags(), (("fp", "flux-plunger"),), ("apps",))


def test_a_stopped_controller_without_a_lease_discounts_none(monkeypatch):
    world = World(monkeypatch, stopped=stop.Stopped(found=True, lease=None))
    told = Told()
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(stop_deployment=CTL),
                      told.hooks(with_covered=True))
    assert told.said[-1] == ("covered", ())
    assert world.steps() == ["stop", "run"]


def test_the_callers_check_is_told_the_stopped_lease(monkeypatch):
    World(monkeypatch, stopped=stop.Stopped(found=True, lease=("fp", "flux-plunger")))
    told = Told()
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(stop_deployment=CTL),
                      told.hooks(with_covered=True))
    assert told.said[-1] == ("covered", (("fp", "flux-plunger"),))


# -- the global deadline --------------------------------------------------------------------


def test_the_global_deadline_counts_from_after_the_stop(monkeypatch):
    world = World(monkeypatch)
    world.cost["stop"] = 50.0
    fence_sweep.sweep(Reads([fenced("a")]), APPS,
                      SweepOptions(stop_deployment=CTL, deadline=30), Told().hooks())
    assert run_kw(world)["deadline"] == 1080.0


def test_no_global_deadline_by_default(monkeypatch):
    world = World(monkeypatch)
    fence_sweep.sweep(Reads([fenced("a")]), APPS, SweepOptions(deadline=0), Told().hooks())
    assert run_kw(world)["deadline"] is None


# -- the wait for uninstalls ----------------------------------------------------------------


def test_the_wait_for_uninstalls_comes_first_with_an_executor_that_never_recovers(monkeypatch):
    def covers(hr):
        return None

    done = rf.FenceResult("apps", "a", True, False, "after helm-controller's uninstall")
    world = World(monkeypatch, check=ControllerCheck(covered=covers), waited=(["b"], [done]))
    told = Told()
    kube = Reads([fenced("a"), fenced("b"), plain("c")])
    selection = Selection("apps", selector="app=web")
    swept = fence_sweep.sweep(kube, selection, SweepOptions(wait_uninstall=True, timeout=5),
                              told.hooks())
    assert world.steps() == ["check", "wait_uninstalls", "run"]
    assert world.log[1][1:] == (["a", "b"], 5)
    assert world.log[2][1] == ["b"]  # only what the wait left fenced
    executor = world.executor
    assert executor is not None and executor.kube is kube
    assert executor.opt.allow_recover is False
    assert executor.opt.selector == parse("app=web")
    assert executor.opt.covered is covers
    assert executor.recorder.enabled is True and executor.recorder.kube is kube
    assert executor.recorder.notifier == "the notifier"
    assert told.said == [("notifier",)]
    assert swept.results == [done, freed("b")]  # released while waiting, first


def test_no_wait_without_a_fenced_release(monkeypatch):
    world = World(monkeypatch)
    told = Told()
    swept = fence_sweep.sweep(Reads([plain("a")]), APPS, SweepOptions(wait_uninstall=True),
                              told.hooks())
    assert world.steps() == ["check", "run"] and told.said == []
    assert swept.results == []


@pytest.mark.parametrize("opts", [SweepOptions(wait_uninstall=True, dry_run="server"),
                                  SweepOptions(wait_uninstall=False)])
def test_no_wait_in_a_server_dry_run_nor_unasked(monkeypatch, opts):
    world = World(monkeypatch)
    told = Told()
    swept = fence_sweep.sweep(Reads([fenced("a")]), APPS, opts, told.hooks())
    assert world.steps() == ["check", "run"] and told.said == []
    assert swept.results == [freed("a")]


def test_the_wait_is_bounded_by_its_timeout_within_the_deadline(monkeypatch):
    world = World(monkeypatch)
    world.cost["check"] = 10.0  # the deadline counts from before the check
    fence_sweep.sweep(Reads([fenced("a")]), APPS,
                      SweepOptions(wait_uninstall=True, timeout=120, deadline=30),
                      Told().hooks())
    assert world.log[1] == ("wait_uninstalls", ["a"], 20.0)


def test_the_wait_keeps_a_shorter_timeout_than_the_deadline(monkeypatch):
    world = World(monkeypatch)
    fence_sweep.sweep(Reads([fenced("a")]), APPS,
                      SweepOptions(wait_uninstall=True, timeout=5, deadline=30),
                      Told().hooks())
    assert world.log[1] == ("wait_uninstalls", ["a"], 5)


def test_a_deadline_already_past_leaves_the_wait_no_time(monkeypatch):
    world = World(monkeypatch)
    world.cost["check"] = 40.0
    fence_sweep.sweep(Reads([fenced("a")]), APPS,
                      SweepOptions(wait_uninstall=True, timeout=120, deadline=30),
                      Told().hooks())
    assert world.log[1] == ("wait_uninstalls", ["a"], 0.0)


# -- a controller pod that did not go -------------------------------------------------------


def left(**kw) -> stop.Stopped:
    return stop.Stopped(found=True, selector="app=fp", **kw)


def test_a_stop_that_left_no_pod_looks_no_further(monkeypatch):
    world = World(monkeypatch, stopped=left())
    kube = Reads([fenced("a")])
    swept = fence_sweep.sweep(kube, APPS, SweepOptions(stop_deployment=CTL), Told().hooks())
    assert world.steps() == ["stop", "check", "run"]
    assert len(kube.calls) == 1 and swept.results == [freed("a")]


@pytest.mark.parametrize("stopped", [left(pods_left=["pod/ctl-1"]), left(pods_unknown=True)])
def test_a_pod_left_or_unknown_gets_the_stop_timeout_then_a_second_look(monkeypatch, stopped):
    world = World(monkeypatch, stopped=stopped)
    kube = Reads([fenced("a"), fenced("b")], [plain("a"), fenced("b")])
    swept = fence_sweep.sweep(kube, APPS, SweepOptions(stop_deployment=CTL, stop_timeout=9),
                              Told().hooks())
    assert world.steps() == ["stop", "check", "run", "wait_for_pods"]
    assert world.log[-1] == ("wait_for_pods", "fp", "app=fp", 9)
    assert len(kube.calls) == 2
    assert swept.results == [
        freed("a"),
        rf.FenceResult("apps", "b", False, False,
                       "fenced after the sweep; a flux-plunger is still running"),
    ]


def test_the_wait_for_the_pods_is_bounded_by_the_deadline(monkeypatch):
    world = World(monkeypatch, stopped=left(pods_left=["pod/ctl-1"]))
    world.cost["check"] = 25.0
    fence_sweep.sweep(Reads([fenced("a")], [plain("a")]), APPS,
                      SweepOptions(stop_deployment=CTL, stop_timeout=9, deadline=30),
                      Told().hooks())
    assert world.log[-1] == ("wait_for_pods", "fp", "app=fp", 5.0)


def test_without_a_pod_selector_it_only_looks_again(monkeypatch):
    world = World(monkeypatch, stopped=stop.Stopped(found=True, pods_unknown=True))
    kube = Reads([fenced("a")], [fenced("a")])
    swept = fence_sweep.sweep(kube, APPS, SweepOptions(stop_deployment=CTL), Told().hooks())
    assert world.steps() == ["stop", "check", "run"]
    assert len(kube.calls) == 2
    assert [(r.name, r.released) for r in swept.results] == [("a", False)]


def test_the_second_look_reports_every_refence_sorted_after_the_rest(monkeypatch):
    # "d" was not released by the sweep: its own result stays, not a second line
    world = World(monkeypatch, stopped=left(pods_left=["pod/ctl-1"]), released={"d": False})
    kube = Reads([fenced("c"), fenced("a", "ops"), fenced("b"), fenced("d")],
                 [fenced("c"), plain("b"), fenced("d"), fenced("a", "ops"), fenced("e")])
    swept = fence_sweep.sweep(kube, Selection(None, all_namespaces=True),
                              SweepOptions(stop_deployment=CTL), Told().hooks())
    again = "fenced after the sweep; a flux-plunger is still running"
    assert world.log[2][1] == ["b", "c", "d", "a"]  # the LIST sorted by namespace, name
    assert [(r.namespace, r.name, r.released, r.detail) for r in swept.results] == [
        ("apps", "b", True, ""),
        ("apps", "d", False, ""),
        ("apps", "c", False, again),
        ("apps", "e", False, again),
        ("ops", "a", False, again),
    ]


def test_every_step_is_handed_the_commands_client(monkeypatch):
    world = World(monkeypatch, stopped=left(pods_left=["pod/ctl-1"]), waited=(["a"], []))
    kube = Reads([fenced("a")], [plain("a")])
    swept = fence_sweep.sweep(
        kube, APPS, SweepOptions(stop_deployment=CTL, wait_uninstall=True), Told().hooks()
    )
    assert world.handed == [
        ("stop", kube),
        ("check", kube),
        ("wait_uninstalls", kube),
        ("run", kube),
        ("wait_for_pods", kube),
    ]
    assert [c[0] for c in kube.calls] == ["LIST", "LIST"]
    assert swept.results == [freed("a")]
