"""The verbs as the command line runs them, without the command line (issue 33: what
``release-fence`` and ``recover``/``resume-owned`` do lives in verbs/): the sweep of
``release-fence`` (verbs/fence_sweep.py) tells its caller what happens through hooks, in
order; ``run_once`` (verbs/recover.py) reads the selection and runs one pass, telling its
progress.  No cluster: the reads and the passes are scripted."""
from __future__ import annotations

import contextlib
import threading

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.verbs import fence_sweep, recover, stop
from kubectl_flux_plunger.verbs import release_fence as rf
from kubectl_flux_plunger.verbs.select import Selection

from . import builders as B

pytestmark = pytest.mark.unit

APPS = Selection(namespace="apps")


def _fenced(name):
    return B.hr(name, "apps", finalizers=[constants.FENCE])


class Reads:
    """The reads of a selection: ``list_hrs`` answers ``lists`` in order, ``get_hr`` by name."""

    request_timeout = None

    def __init__(self, *lists, named=None):
        self.lists = [list(x) for x in lists]
        self.named = named or {}
        self.calls = []

    def list_hrs(self, namespace, selector):
        self.calls.append(("LIST", namespace))
        return self.lists.pop(0)

    def get_hr(self, namespace, name):
        self.calls.append(("GET", name))
        return self.named.get(name)


def _hooks(said):
    return fence_sweep.SweepHooks(
        covered=lambda leases: said.append(("covered", leases)),
        stopped=lambda ref, s: said.append(("stopped", ref, s)),
        missing=lambda m: said.append(("missing", m)),
        notifier=lambda: said.append(("notifier",)),
    )


def test_a_client_dry_run_stops_nothing_asks_no_lease_and_plans_the_fenced():
    said = []
    kube = Reads(named={"a": _fenced("a"), "b": B.hr("b", "apps")})
    opts = fence_sweep.SweepOptions(dry_run="client", stop_deployment=("fp", "ctl"))
    swept = fence_sweep.sweep(kube, Selection("apps", names=("a", "b", "gone")), opts,
                              _hooks(said))
    assert said[0] == ("stopped", ("fp", "ctl"), None)
    assert [s[0] for s in said] == ["stopped", "missing"]
    assert 'helmreleases.helm.toolkit.fluxcd.io "gone" not found' in said[1][1]
    assert swept.would_release == [("apps", "a")] and swept.results == []
    assert not swept.ok                                   # a named release is missing


def test_a_stop_that_fails_propagates_before_any_read(monkeypatch):
    def refuse(*a, **k):
        raise stop.StopError("could not scale Deployment fp/ctl to zero: forbidden")

    monkeypatch.setattr(stop, "stop", refuse)
    said, kube = [], Reads([_fenced("a")])
    with pytest.raises(stop.StopError):
        fence_sweep.sweep(kube, APPS, fence_sweep.SweepOptions(stop_deployment=("fp", "ctl")),
                          _hooks(said))
    assert said == [] and kube.calls == []


def test_the_stopped_controllers_lease_is_not_counted_and_a_refence_is_not_released(monkeypatch):
    stopped = stop.Stopped(found=True, pods_left=["pod/ctl-1"], selector="app=fp",
                           lease=("fp", "flux-plunger"))
    monkeypatch.setattr(stop, "stop", lambda *a, **k: stopped)
    waited = []
    monkeypatch.setattr(stop, "wait_for_pods", lambda kube, ns, sel, wait: waited.append((ns, sel)))
    ran = []

    def release(kube, fenced, **kw):
        ran.append(([hr["metadata"]["name"] for hr in fenced], kw["window"], kw["concurrency"]))
        return [rf.FenceResult("apps", hr["metadata"]["name"], True, False, "") for hr in fenced]

    monkeypatch.setattr(rf, "run", release)
    said = []
    # the first LIST decides; the second, after the stop timeout, finds "b" fenced again
    kube = Reads([_fenced("a"), _fenced("b"), B.hr("c", "apps")], [_fenced("b")])
    opts = fence_sweep.SweepOptions(stop_deployment=("fp", "ctl"), retry_window=7, concurrency=3)
    swept = fence_sweep.sweep(kube, APPS, opts, _hooks(said))
    assert said == [("stopped", ("fp", "ctl"), stopped), ("covered", (("fp", "flux-plunger"),))]
    assert ran == [(["a", "b"], 7, 3)] and waited == [("fp", "app=fp")]
    assert [(r.name, r.released, r.detail) for r in swept.results] == [
        ("a", True, ""),
        ("b", False, "fenced after the sweep; a flux-plunger is still running")]
    assert not swept.ok


def test_the_wait_for_uninstalls_asks_the_notifier_only_when_it_writes(monkeypatch):
    waits = []

    def wait_uninstalls(executor, fenced, timeout):
        waits.append((executor.recorder.enabled, timeout))
        return [], [rf.FenceResult("apps", "a", True, False, "after helm-controller's uninstall")]

    monkeypatch.setattr(rf, "wait_uninstalls", wait_uninstalls)
    monkeypatch.setattr(rf, "run", lambda kube, fenced, **kw: [])
    for dry_run, asked, released in (("none", [("covered", ()), ("notifier",)], ["a"]),
                                     ("server", [("covered", ())], [])):
        said = []
        opts = fence_sweep.SweepOptions(dry_run=dry_run, wait_uninstall=True, timeout=5)
        swept = fence_sweep.sweep(Reads([_fenced("a")]), APPS, opts, _hooks(said))
        assert said == asked
        assert [r.name for r in swept.results if r.released] == released  # no wait: server
    assert waits == [(True, 5)]


class Watching:
    """A stand-in for cli/progress.Stream: records what it is told."""

    def __init__(self):
        self.stop = threading.Event()
        self.total = -1
        self.told = []

    def started(self, i, hr):
        self.told.append(("started", i))

    def finished(self, i, outcome):
        self.told.append(("finished", i))

    @contextlib.contextmanager
    def interruptible(self):
        self.told.append(("interruptible", self.total))
        yield
        self.told.append(("done",))


class Listing:
    """The reads ``run_once`` makes through ``fetch``: one LIST, no connection pool."""

    request_timeout = None

    def __init__(self, items):
        self.items = items

    def list_hrs(self, namespace, selector):
        return list(self.items)

    def ensure_connections(self, n):
        pass


def test_run_once_reads_then_runs_one_pass_telling_its_progress(monkeypatch):
    passes = []

    def one_pass(executor, releases, how, **kw):
        passes.append((how, executor.opt.allow_recover, executor.opt.handshake_timeout,
                       executor.recorder.enabled, kw["stop"] is progress.stop))
        out = []
        for i, hr in enumerate(releases):
            kw["on_start"](i, hr)
            o = Outcome("apps", hr["metadata"]["name"], Result.UNCHANGED, "")
            kw["on_result"](i, o)
            out.append(o)
        return out

    monkeypatch.setattr(recover, "run", one_pass)
    progress = Watching()
    once = recover.Once(recover.RESUME_ROWS, "server", concurrency=4, handshake_timeout=9)
    ran = recover.run_once(Listing([B.hr("a", "apps"), B.hr("b", "apps")]), APPS, once, progress)
    assert passes == [(recover.Pass(recover.RESUME_ROWS, 4, fresh=False), False, 9, False, True)]
    assert progress.told == [("interruptible", 2), ("started", 0), ("finished", 0),
                             ("started", 1), ("finished", 1), ("done",)]
    assert ran.releases == 2 and ran.missing == [] and [o.name for o in ran.outcomes] == ["a", "b"]
