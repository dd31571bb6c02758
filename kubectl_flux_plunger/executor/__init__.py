"""The executor: turns a decision of :mod:`~kubectl_flux_plunger.core.plan` into requests,
each carrying the preconditions of the read that decided it, and re-reads.  One unit per
action, a classifier and a switch (helm-controller's ``internal/reconcile``):

* ``executor``     — ``Executor``: the entry points (``reconcile``, ``settle``) and the
  one place a pass's ``Outcome`` is made;
* ``read``         — the fresh read that decides (a watch-list, else a GET);
* ``switch``       — picks the unit of the action the classifier names and runs it;
* ``classify``     — the state classifier: the fresh read and its decision → the action;
* ``dryrun``       — the PLAN action: the plan of a decision, without a write;
* ``recover``, ``relinquish``, ``remove_fence`` — one unit per action;
* ``steps``        — what they share: the recovery's step texts, the fence not ours;
* ``handshake``    — waiting for helm-controller to observe the suspension;
* ``primitives``   — every write primitive, one ``retry_on_conflict``; storage requests;
* ``outcome``      — ``Result``, ``Outcome``, the ``Report`` the steps return, ``Options``;
* ``drain``        — the drain loop; ``backup`` — where a Secret is saved before its DELETE.

Here: only the names other packages import."""

from .executor import Executor
from .outcome import (
    Covered,
    Options,
    Outcome,
    Result,
    Stopped,
    fence_hint,
    leftover_hint,
    utcnow,
)

__all__ = [
    "Covered",
    "Executor",
    "Options",
    "Outcome",
    "Result",
    "Stopped",
    "fence_hint",
    "leftover_hint",
    "utcnow",
]
