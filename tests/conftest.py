"""Shared fixtures.  Tiers are markers given by directory (tests/unit, tests/cli,
tests/apiserver, tests/e2e, tests/kind).  The apiserver and e2e tiers run against a real kube-apiserver +
etcd compiled from Go modules (see testplane/); a missing toolchain fails them loudly —
only the kind tier may skip."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("unit", "cli", "apiserver", "e2e", "kind", "release")


def _tree_status() -> set[str] | None:
    """``git status --porcelain`` of the checkout (untracked files listed one by one), or
    None outside a git work tree.  Ignored build outputs (.venv, .coverage-data, …) are not
    in it."""
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(proc.stdout.splitlines()) if proc.returncode == 0 else None


def pytest_sessionstart(session):
    session.config._tree_before = _tree_status()
    # kubectl started by any test (or by a tool a test starts) keeps its discovery and HTTP
    # caches here rather than in ~/.kube/cache, or in ./.kube/cache where HOME is unset
    if not os.environ.get("KUBECACHEDIR"):
        cache = tempfile.mkdtemp(prefix="kfp-kubecache-")
        session.config._kube_cache = cache
        os.environ["KUBECACHEDIR"] = cache


def pytest_sessionfinish(session, exitstatus):
    """The work tree stays clean: a run that leaves a new file (or changes a tracked one)
    in the checkout fails, whichever test did it (a tool started without HOME writes its
    cache into the working directory: kubectl's ``.kube/cache``, for one)."""
    cache = getattr(session.config, "_kube_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
        os.environ.pop("KUBECACHEDIR", None)
    before = getattr(session.config, "_tree_before", None)
    after = _tree_status()
    if before is None or after is None:
        return
    new = sorted(after - before)
    if new:
        shown = "\n  ".join(new[:20]) + ("\n  …" if len(new) > 20 else "")
        print(f"\nerror: the test run left {len(new)} new entr{'y' if len(new) == 1 else 'ies'} "
              f"in the work tree (git status --porcelain):\n  {shown}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

# Every test gets its own $XDG_CACHE_HOME (below), so what flux-plunger remembers about a
# server (kubectl_flux_plunger/kube/servers.py) never leaks from one test into the next, nor into
# the user's ~/.cache.  What the tests themselves keep there stays where it is: the built
# test binaries and Go's build cache.
if "FLUX_PLUNGER_TESTBIN_CACHE" not in os.environ:
    from testplane.binaries import cache_root

    os.environ["FLUX_PLUNGER_TESTBIN_CACHE"] = str(cache_root())
if "GOCACHE" not in os.environ and sys.platform.startswith("linux"):
    os.environ["GOCACHE"] = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "go-build")


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """A fresh user cache directory for the test and every process it starts."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        except ValueError:          # a test module outside tests/ (the clean-tree check's probe)
            continue
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    """The session's control plane (or an existing cluster via FLUX_PLUNGER_TEST_KUBECONFIG)."""
    from testplane.binaries import BuildError
    from testplane.plane import ControlPlane, PlaneError

    shared = os.environ.get("FLUX_PLUNGER_TEST_PLANE_DIR")
    if shared:   # a plane another process started and stops (hack/mutation.py)
        try:
            joined = ControlPlane.shared(shared)
        except PlaneError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield joined
        return
    existing = os.environ.get("FLUX_PLUNGER_TEST_KUBECONFIG")
    if existing:
        yield ControlPlane.existing(existing)
        return
    cp = ControlPlane(tmp_path_factory.mktemp("plane"))
    try:
        cp.start()
    except (BuildError, PlaneError, TimeoutError) as exc:
        cp.stop()
        pytest.fail(f"cannot start the real control plane: {exc}", pytrace=False)
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def flux_binary() -> Path:
    """The real Flux CLI (v2.9.5, built from its Go module by testplane.binaries)."""
    from testplane import binaries

    try:
        return binaries.ensure("flux")
    except binaries.BuildError as exc:
        pytest.fail(f"cannot build the real flux CLI: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def remote_plane(tmp_path_factory):
    """A second real control plane: the remote cluster of ``spec.kubeConfig`` releases
    (no Flux CRDs: only Helm storage lives there)."""
    from testplane.binaries import BuildError
    from testplane.plane import ControlPlane, PlaneError

    cp = ControlPlane(tmp_path_factory.mktemp("remote-plane"))
    try:
        cp.start(crds=False)
    except (BuildError, PlaneError, TimeoutError) as exc:
        cp.stop()
        pytest.fail(f"cannot start the remote control plane: {exc}", pytrace=False)
    yield cp
    cp.stop()


@pytest.fixture
def kube(plane):
    k = plane.kube()
    yield k
    k.close()


@pytest.fixture
def cluster(kube):
    from testplane.cluster import Cluster
    return Cluster(kube)


@pytest.fixture
def ns(cluster):
    return cluster.namespace()


@pytest.fixture(autouse=True)
def _show_plane_logs_on_failure(request):
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "plane" in request.fixturenames:
        plane = request.getfixturevalue("plane")
        sys.stderr.write("\n" + plane.logs() + "\n")


@pytest.fixture(autouse=True)
def _flux_plunger_leases_stay_in_their_test(request):
    """The writing verbs look for running flux-plunger controllers in every namespace of the
    cluster (issue 36), and the session shares one control plane: a Lease a test leaves
    live (a serve it killed, the reference controller's it wrote) would cover the releases
    of the tests after it.  So every flux-plunger Lease a test created is deleted when it
    ends — after its own fixtures have stopped the processes that renew them."""
    if "plane" not in request.fixturenames:
        yield
        return
    from kubectl_flux_plunger.kube.controller_lease import _ours
    from kubectl_flux_plunger.kube import KubeError, lease_path

    kube = request.getfixturevalue("plane").kube()
    try:
        before = {(i.get("metadata") or {}).get("uid") for i in kube.list_cluster_leases()}
        yield
        for lease in kube.list_cluster_leases():
            md = lease.get("metadata") or {}
            if md.get("uid") in before or not _ours(lease, ()):
                continue
            try:
                kube.request("DELETE", "DELETE", lease_path(md["namespace"], md["name"]))
            except KubeError as exc:
                if not exc.not_found:
                    raise
    finally:
        kube.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


# What a process logs when a server refuses its first watch-list (Kubernetes 1.33: WatchList
# off).  The apiserver's 422 names the field error type "Forbidden", though no permission was
# refused, so the log checks for Forbidden answers tell this one line apart — and assert it
# is there exactly when the server has no watch-lists.
# The line comes from whichever meets the refusal first: serve's sync (its watch-list of
# HelmReleases: "listing HelmReleases instead") or the executor's read of one release
# ("reading with GET"); after it the process sends no watch-list, so it is logged once.
NO_WATCH_LISTS_LOG = ("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch "
                      "unless the WatchList feature gate is enabled): ")
NO_WATCH_LISTS_THEN = ("reading with GET", "listing HelmReleases instead")


def no_watch_lists_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if "the server does not serve watch-lists (" in line
            and any(NO_WATCH_LISTS_LOG + then in line for then in NO_WATCH_LISTS_THEN)]


class CLIResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"<exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}>"


def run_cli(*args: str, kubeconfig: str | Path | None = None, env: dict | None = None,
            timeout: float = 120, via_kubectl: bool = False) -> CLIResult:
    """Run the plugin as a user would: a real process (optionally through ``kubectl``'s
    plugin dispatch)."""
    e = dict(os.environ)
    e.pop("KUBECONFIG", None)
    if kubeconfig:
        e["KUBECONFIG"] = str(kubeconfig)
    e.update(env or {})
    if via_kubectl:
        venv_bin = str(Path(sys.executable).parent)
        e["PATH"] = venv_bin + os.pathsep + e.get("PATH", "")
        argv = ["kubectl", "flux-plunger", *args]
    else:
        argv = [sys.executable, "-m", "kubectl_flux_plunger", *args]
    return CLIResult(subprocess.run(argv, capture_output=True, text=True, env=e,
                                    timeout=timeout, stdin=subprocess.DEVNULL))


@pytest.fixture
def cli(plane):
    """``cli(*args)`` runs the plugin against the test control plane as admin."""
    def _run(*args, kubeconfig=None, **kw):
        return run_cli(*args, kubeconfig=kubeconfig or plane.kubeconfig, **kw)
    return _run
