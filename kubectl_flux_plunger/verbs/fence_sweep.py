"""``release-fence`` as the command runs it (SPEC §7): stop the controller first
(``--stop-deployment``), read the running-controller check, read the fenced releases, let
helm-controller finish their uninstalls (``--wait-uninstall``), release them
(verbs/release_fence.py), and look again behind a controller pod that did not go.

What the user sees is the caller's (cli/release_fence.py): it is told through
:class:`SweepHooks`, in the order things happen, and renders the :class:`Swept` result (a
refusal of the running-controller check included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import detect
from ..core.objects import Obj
from ..executor import Executor, Options
from ..kube import Kube
from ..report.events import Recorder
from . import release_fence as verb
from . import stop as stopping
from .controller_check import ControllerCheck, LeaseFlags
from .controller_check import check as controller_check
from .release_fence import Check, FenceResult
from .select import Selection, fetch


@dataclass(frozen=True)
class SweepOptions:
    """The flags of ``release-fence``, parsed.  Durations in seconds; ``deadline`` 0: no
    global deadline (it counts from after the stop, which is bounded on its own);
    ``stop_deployment``: the controller's Deployment (namespace, name) to scale to zero
    first; ``lease``: the flags of the running-controller check."""

    dry_run: str = "none"
    wait_uninstall: bool = False
    timeout: float = 120.0
    retry_window: float = 60.0
    deadline: float = 0.0
    concurrency: int = verb.DEFAULT_CONCURRENCY
    stop_deployment: tuple[str, str] | None = None
    stop_timeout: float = 100.0
    lease: LeaseFlags = field(default_factory=LeaseFlags)


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class SweepHooks:
    """What the sweep asks of its caller, in this order.

    * ``stopped(ref, stopped)`` once the Deployment ``ref`` was stopped (``stopped`` None:
      a client dry run, nothing was sent); a :class:`~.stop.StopError` instead propagates
      (no fence is touched then);
    * ``warned(message)`` for each warning of the running-controller check, read after
      the stop (verbs/controller_check.py, from ``SweepOptions.lease``; not in a client dry
      run), not counting the Leases of the controller just stopped; a refusal of it ends
      the sweep (``Swept.refusal``);
    * ``missing(message)`` for each named release not found;
    * ``notifier()``: the Recorder's notifier, asked only when the wait writes.

    ``covered(stopped_leases)``, when given, is the running-controller check
    (``Options.covered``) instead of the Lease survey, asked at the same point."""

    covered: Callable[[tuple[tuple[str, str], ...]], Check | None] | None = None
    stopped: Callable[[tuple[str, str], stopping.Stopped | None], None] = _nothing
    warned: Callable[[str], None] = _nothing
    missing: Callable[[str], None] = _nothing
    notifier: Callable[[], Any] = _nothing


@dataclass
class Swept:
    """What the sweep did: ``results`` in order; ``missing``, the named releases not found;
    ``would_release``, in a client dry run, the fenced releases (nothing else is done);
    ``refusal``: why nothing was read nor released (the running-controller check refused)."""

    results: list[FenceResult] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    would_release: list[tuple[str, str]] = field(default_factory=list)
    refusal: str = ""

    @property
    def ok(self) -> bool:
        return all(r.released for r in self.results) and not self.missing


def _key(hr: Obj) -> tuple[str, str]:
    return hr["metadata"]["namespace"], hr["metadata"]["name"]


def _within(bound: float, ends: float | None) -> float:
    """``bound`` seconds, no further than the global deadline ``ends``."""
    return bound if ends is None else max(0.0, min(bound, ends - time.monotonic()))


def _stop(kube: Kube, opts: SweepOptions, hooks: SweepHooks) -> stopping.Stopped | None:
    """``--stop-deployment``: scale the controller to zero and wait for its pods."""
    ref = opts.stop_deployment
    if ref is None:
        return None
    if opts.dry_run == "client":
        hooks.stopped(ref, None)
        return None
    ns, name = ref
    done = stopping.stop(
        kube,
        ns,
        name,
        wait=opts.stop_timeout,
        window=opts.retry_window,
        dry_run=(opts.dry_run == "server"),
    )
    hooks.stopped(ref, done)
    return done


def _controllers(
    kube: Kube,
    selection: Selection,
    opts: SweepOptions,
    hooks: SweepHooks,
    stopped: stopping.Stopped | None,
) -> ControllerCheck:
    """The running-controller check, not counting the Lease of the controller just stopped;
    its warnings told through ``hooks.warned``."""
    leases = (stopped.lease,) if stopped is not None and stopped.lease else ()
    if hooks.covered is not None:
        return ControllerCheck(hooks.covered(leases))
    found = controller_check(kube, opts.lease, stopped=leases, namespaces=(selection.namespace,))
    for line in found.warnings:
        hooks.warned(line)
    return found


def sweep(kube: Kube, selection: Selection, opts: SweepOptions, hooks: SweepHooks) -> Swept:
    """Run ``release-fence`` over ``selection``."""
    stopped = _stop(kube, opts, hooks)
    # the global deadline counts from here: the stop before it is bounded on its own
    ends = time.monotonic() + opts.deadline if opts.deadline else None
    # every flux-plunger Lease, read after the stop (a controller that stopped gave its
    # Lease up) and before the LIST that decides; the stopped controller's own Lease does
    # not count (it may outlive a pod that did not drain)
    covered = None
    if opts.dry_run != "client":
        found = _controllers(kube, selection, opts, hooks, stopped)
        if found.refusal:
            return Swept(refusal=found.refusal)
        covered = found.covered
    releases, missing = fetch(kube, selection)
    for m in missing:
        hooks.missing(m)
    fenced = [hr for hr in releases if detect.is_fenced(hr)]
    if opts.dry_run == "client":
        return Swept(missing=missing, would_release=[_key(hr) for hr in fenced])
    if opts.wait_uninstall and fenced and opts.dry_run == "none":
        executor = Executor(
            kube,
            Recorder(kube, enabled=True, notifier=hooks.notifier()),
            options=Options(allow_recover=False, selector=selection.matcher(), covered=covered),
        )
        fenced, released_waiting = verb.wait_uninstalls(
            executor, fenced, _within(opts.timeout, ends)
        )
    else:
        released_waiting = []
    results = released_waiting + verb.run(
        kube,
        fenced,
        window=opts.retry_window,
        deadline=ends,
        concurrency=opts.concurrency,
        selector=selection.matcher(),
        covered=covered,
    )
    if stopped is not None and (stopped.pods_left or stopped.pods_unknown):
        results = _look_again(kube, selection, opts, stopped, ends, results)
    return Swept(results=results, missing=missing)


def _look_again(
    kube: Kube,
    selection: Selection,
    opts: SweepOptions,
    stopped: stopping.Stopped,
    ends: float | None,
    results: list[FenceResult],
) -> list[FenceResult]:
    """A controller pod that did not go may fence a release behind the sweep: give it the
    stop timeout once more to go, then look for fences again (a release fenced again is
    NOT released)."""
    if stopped.selector and opts.stop_deployment:
        stopping.wait_for_pods(
            kube, opts.stop_deployment[0], stopped.selector, _within(opts.stop_timeout, ends)
        )
    again, _ = fetch(kube, selection)
    refenced = {_key(hr) for hr in again if detect.is_fenced(hr)}
    refenced -= {(r.namespace, r.name) for r in results if not r.released}
    return [r for r in results if (r.namespace, r.name) not in refenced] + [
        FenceResult(ns, n, False, False, "fenced after the sweep; a flux-plunger is still running")
        for ns, n in sorted(refenced)
    ]
