"""The running-controller check of the verbs that write (SPEC §2): every flux-plunger Lease of
the cluster, read with one LIST before the reads that decide, and which live controller
covers each release.  What the check says is returned as data (:class:`ControllerCheck`):
the per-release check for ``Options.covered``, the warning lines, a refusal; the command
line prints them (``warning:``, ``error:`` and exit 1).

``--lease-name`` only adds a Lease to count as flux-plunger's; it never narrows the check.
A refused cluster-wide LIST falls back to ``--lease-namespace`` and the releases' own
namespaces with one warning line; when no Lease can be read at all the verb refuses
(nothing written): it cannot tell a controller's recovery in flight from a crash leftover.
``--force`` reads nothing and covers nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from ..core.objects import Obj
from ..executor import Covered
from ..kube import Kube, controller_lease

# which running flux-plunger controller covers a release (``Options.covered``)
Covering = Callable[[Obj], Covered | None]


@dataclass(frozen=True)
class LeaseFlags:
    """``--lease-namespace``, ``--lease-name`` and ``--force`` of a writing verb."""

    namespace: str | None = None
    name: str | None = None
    force: bool = False


class BadFlag(ValueError):
    """A lease flag the check cannot use (``--lease-namespace ''``): the command line says
    it as a usage error, when the check is made."""


@dataclass(frozen=True)
class ControllerCheck:
    """What the check found: ``covered``, the per-release check (None: no live controller,
    or ``--force``); ``warnings``, lines to say on stderr (the survey fell back);
    ``refusal``, why the verb must write nothing (no Lease could be read), else empty."""

    covered: Covering | None = None
    warnings: tuple[str, ...] = ()
    refusal: str = ""


def check(
    kube: Kube,
    lease: LeaseFlags,
    *,
    stopped: tuple[tuple[str, str], ...] = (),
    namespaces: tuple[str | None, ...] = (),
) -> ControllerCheck:
    """The check, read once, before the reads that decide.  ``stopped``: Leases
    (namespace, name) of a controller this command has just stopped (``release-fence
    --stop-deployment``), not counted; ``namespaces``: the releases' own (the fallback
    reads them when the cluster-wide LIST is refused).  Raises :class:`BadFlag` for an
    empty ``--lease-namespace``."""
    if lease.namespace is not None and not lease.namespace.strip():
        raise BadFlag("--lease-namespace must not be empty")
    if lease.force:
        return ControllerCheck()
    ns = lease.namespace or controller_lease.default_lease_namespace()
    names = (lease.name,) if lease.name else ()
    also = tuple(n for n in namespaces if n)
    found = controller_lease.survey(kube, ns, names=names, also=also)
    if found.blind():
        return ControllerCheck(
            refusal=f"cannot read any flux-plunger controller's Lease ({found.list_error}), so "
            "a running controller's recovery in flight cannot be told from a crash leftover; "
            "no HelmRelease was written. Grant list on leases cluster-wide (docs/INSTALL.md, "
            '"What the one-shot verbs need"), or stop every flux-plunger controller and '
            "pass --force"
        )
    warnings = (found.warning(),) if found.warning() else ()
    found = found.without(stopped)
    if not found.live():
        return ControllerCheck(warnings=warnings)
    now = dt.datetime.now(dt.timezone.utc)

    def covered(hr: Obj) -> Covered | None:
        by = found.covering(hr)
        return None if by is None else Covered(by.name, by.deferral(now))

    return ControllerCheck(covered, warnings)
