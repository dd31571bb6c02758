"""Stop the controller before ``release-fence`` sweeps (``--stop-deployment NS/NAME``).

What an uninstall of the controller must do first: scale its Deployment to zero (nothing
may touch a HelmRelease before that succeeded: a running flux-plunger could fence again
behind the sweep; a Deployment that does not exist has nothing to stop, e.g. the hook
running again after it was deleted, and the sweep goes on), then wait a bounded time for
its pods to go (their own drain releases what it can inside the grace period).  The chart's
pre-delete hook runs this with the controller's own image: one image, one tool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..core import constants as C
from ..kube import Kube, KubeError

RETRY_SLEEP = 2.0


class StopError(Exception):
    """The Deployment could not be read or scaled; no fence may be touched."""


@dataclass
class Stopped:
    found: bool
    pods_left: list[str] = field(default_factory=list)
    pods_unknown: bool = False  # the pods could not be listed at the end
    selector: str = ""
    # the Lease (namespace, name) the stopped controller led on, from its Deployment's
    # arguments (None: no leader election there, or no Deployment)
    lease: tuple[str, str] | None = None


def _flag(args: list[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` in ``args`` (the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(args):
            value = args[i + 1]
    return value


def _elects(args: list[str]) -> bool:
    """``--leader-elect`` (or ``=true``) is on, the last one winning."""
    on = False
    for arg in args:
        if arg == "--leader-elect":
            on = True
        elif arg.startswith("--leader-elect="):
            on = arg.split("=", 1)[1].lower() not in ("false", "0")
    return on


def lease_of(deployment: dict[str, Any]) -> tuple[str, str] | None:
    """The Lease a controller Deployment leads on: ``--leader-election-id`` (default the
    contract's, as for the reference controller) in ``--leader-election-namespace``
    (default the Deployment's namespace, where a pod's in-cluster namespace puts it), for
    the first container run with ``--leader-elect``; None when none is."""
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        if not _elects(args):
            continue
        ns = _flag(args, "--leader-election-namespace") or (
            (deployment.get("metadata") or {}).get("namespace") or ""
        )
        return ns, _flag(args, "--leader-election-id") or C.LEASE_NAME
    return None


def selector_of(deployment: dict[str, Any]) -> str:
    """``spec.selector`` as a label selector string."""
    sel = (deployment.get("spec") or {}).get("selector") or {}
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for expr in sel.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


T = TypeVar("T")


def _retry(fn: Callable[[], T], window: float) -> T:
    deadline = time.monotonic() + window
    while True:
        try:
            return fn()
        except KubeError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_SLEEP)


def stop(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    wait: float,
    window: float,
    poll: float = 1.0,
    dry_run: bool = False,
) -> Stopped:
    """Scale ``namespace/name`` to zero and wait up to ``wait`` seconds for its pods.

    Reads and the scale are retried for ``window`` seconds; :class:`StopError` when they
    keep failing.  ``dry_run`` (server dry run): the scale is sent with dryRun=All and
    nothing is waited for."""
    try:
        dep = _retry(lambda: kube.get_deployment(namespace, name), window)
    except KubeError as exc:
        raise StopError(f"could not read Deployment {namespace}/{name}: {exc}") from None
    if dep is None:
        return Stopped(found=False)
    try:
        _retry(lambda: kube.scale_deployment(namespace, name, 0), window)
    except KubeError as exc:
        raise StopError(f"could not scale Deployment {namespace}/{name} to zero: {exc}") from None
    if dry_run:
        return Stopped(found=True, lease=lease_of(dep))
    stopped = wait_for_pods(kube, namespace, selector_of(dep), wait, poll)
    stopped.lease = lease_of(dep)
    return stopped


def wait_for_pods(
    kube: Kube, namespace: str, selector: str, wait: float, poll: float = 1.0
) -> Stopped:
    """Poll the pods of ``selector`` until none is left or ``wait`` seconds passed."""
    deadline = time.monotonic() + wait
    left: list[str] | None = None
    while True:
        try:
            left = sorted(
                f"pod/{p['metadata']['name']}" for p in kube.list_pods(namespace, selector)
            )
        except KubeError:
            left = None
        if left == [] or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    if left is None:
        return Stopped(found=True, pods_unknown=True, selector=selector)
    return Stopped(found=True, pods_left=left, selector=selector)
