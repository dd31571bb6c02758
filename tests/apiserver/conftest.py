"""Fixtures for driving the executor against the real apiserver."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import storage, writes
from kubectl_flux_plunger.report.events import Recorder
from kubectl_flux_plunger.kube import JSON, KubeError, core_path
from kubectl_flux_plunger.executor import Executor, Options
from testplane.cluster import SimulatedHelmController


@pytest.fixture
def make_executor(plane):
    """``make_executor(**options)``: an Executor on its own counted client."""
    made = []

    def _make(*, clock=None, should_stop=None, **opts):
        k = plane.kube()
        made.append(k)
        opts.setdefault("handshake_timeout", 10)
        opts.setdefault("handshake_window", 1.0)
        kw = {}
        if clock:
            kw["clock"] = clock
        if should_stop:
            kw["should_stop"] = should_stop
        return Executor(k, Recorder(k), options=Options(**opts), **kw)
    yield _make
    for k in made:
        k.close()


@pytest.fixture
def executor(make_executor):
    return make_executor()


@pytest.fixture
def hc(cluster, ns):
    """A simulated helm-controller acknowledging suspensions and handling deletes in ``ns``."""
    with SimulatedHelmController(cluster, ns) as sim:
        yield sim


def hold(cluster, ns, name="demo", *, fence=True, suspend=True):
    """Make flux-plunger hold ``ns/name`` as a crashed recovery would: an SSA apply by
    manager flux-plunger of spec.suspend (and the fence)."""
    for _ in range(10):   # a controller's status write may land between read and apply
        hr = cluster.get(ns, name)
        body = writes.acquire_body(hr)
        if not fence:
            body["metadata"].pop("finalizers")
        if not suspend:
            body.pop("spec")
        try:
            return cluster.apply(body, manager=C.FIELD_MANAGER)
        except KubeError as exc:
            if not exc.conflict:
                raise
    raise AssertionError(f"could not hold {ns}/{name}: it kept changing")


def stuck_release(cluster, ns, name="demo", revisions=((1, "superseded"), (2, "uninstalling")),
                  release=None, storage_ns=None, **create):
    """A stuck HelmRelease with Helm storage as an interrupted uninstall leaves it: the
    newest revision ``uninstalling`` and none ``deployed``."""
    cluster.create_hr(ns, name, **create)
    cluster.storage(storage_ns or ns, release or name, list(revisions))
    return cluster.make_stuck(ns, name, release=release)


def corrupt_revision(cluster, ns, release="demo", number=2):
    """Helm storage revision ``number`` of ``release``, ``uninstalling`` by its label, whose
    payload is no Helm Release (base64 of "not gzip nor json")."""
    bad = storage.make_storage_secret(release, ns, number, "uninstalling")
    bad["data"]["release"] = "bm90IGd6aXAgbm9yIGpzb24="
    return cluster.kube.request("CREATE", "POST", core_path("secrets", ns), body=bad,
                                content_type=JSON)

def read_counts(plane) -> dict[str, int]:
    """The client-side count of a recovery's named read and the stream it waits on, on this
    server: one WATCH where the server serves watch-lists (its initial event is the read);
    else — a fresh cache, so the first run against the server — the refused watch-list
    (WATCH, 422), the GET and a WATCH from its resourceVersion."""
    return {"WATCH": 1, "GET": 0} if plane.watch_lists else {"WATCH": 2, "GET": 1}


@contextlib.contextmanager
def recover_holding(plane, cluster, ns, lease_ns, handshake="120s", name="demo"):
    """A one-shot `recover -n NS NAME` (a process) from the moment it holds the release:
    spec.suspend true and owned by flux-plunger's apply, waiting for a handshake no
    helm-controller answers here (for ``handshake``).  Killed at the end if still running."""
    from kubectl_flux_plunger.core import ownership
    from testplane.cluster import eventually

    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubectl_flux_plunger", "recover", "-n", ns, name,
         "--lease-namespace", lease_ns, "--handshake-timeout", handshake],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        eventually(lambda: ownership.owns_suspend(cluster.get(ns, name))
                   and cluster.get(ns, name)["spec"].get("suspend"), 30,
                   "the recovery holding the release")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
