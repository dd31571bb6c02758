"""The command line in-process (``cli.main(argv)``, no subprocess) against a routed fake
API: flag validation that fails before any request, ``status --watch``, the client dry run
and the stop warnings of ``release-fence``, ``version``, ``restore -o name`` and how
``main`` turns exceptions into exit codes.  Milliseconds each."""
from __future__ import annotations

import json

import click
import pytest
import yaml

from kubectl_flux_plunger.executor import backup
from kubectl_flux_plunger import cli
from kubectl_flux_plunger.core import constants, storage
from kubectl_flux_plunger.cli import session
from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.verbs import stop as stop_verb

from . import builders as B

pytestmark = pytest.mark.unit

HRS = "/apis/helm.toolkit.fluxcd.io/v2/namespaces/apps/helmreleases"
SECRETS = "/api/v1/namespaces/apps/secrets"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/fp/leases"
LEASE = f"{LEASES}/{constants.LEASE_NAME}"
# where the writing verbs list the controllers' Leases by default (no pod namespace here)
DEFAULT_LEASES = "/apis/coordination.k8s.io/v1/namespaces/flux-plunger/leases"
# the verbs and status list every Lease of the cluster (issue 36)
CLUSTER_LEASES = "/apis/coordination.k8s.io/v1/leases"


class _Stream:
    def __init__(self, events):
        self.events = events

    def stream(self, size, decode_content=True):
        for e in self.events:
            if isinstance(e, BaseException):
                raise e
            yield json.dumps(e).encode() + b"\n"

    def release_conn(self):
        pass


class Router:
    """The transport of a real :class:`Kube`: answers from ``routes`` — (verb, path) → answers
    in order, the last repeating; an exception answer is raised."""

    def __init__(self, routes):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.sent: list[tuple[str, str]] = []

    def __call__(self, req):
        self.sent.append((req.verb, req.path))
        answers = self.routes[(req.verb, req.path)]
        a = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(a, BaseException):
            raise a
        return _Stream(a) if req.stream else a


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n"
                  "- name: t\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n"
                  "- name: u\n  user: {token: abc}\ncontexts:\n"
                  "- name: t\n  context: {cluster: t, user: u}\n")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    monkeypatch.setattr("sys.argv", ["kubectl-flux_plunger"])
    return str(kc)


@pytest.fixture
def routed(monkeypatch, kubeconfig):
    """Every command's connection is a RouterKube with the routes given."""
    def use(routes):
        k = K.Kube.from_kubeconfig(kubeconfig)
        k._send = router = Router(routes)
        monkeypatch.setattr(session, "connect", lambda *a, **kw: k)
        return router

    return use


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- refused before any request -----------------------------------------------------------

@pytest.mark.parametrize(("argv", "message"), [
    (["status", "-n", " "], "error: --namespace must not be empty"),
    (["status", "-n", "apps", "--lease-namespace", ""],
     "error: --lease-namespace must not be empty"),
    (["recover", "-n", "apps", "--lease-namespace", " "],
     "error: --lease-namespace must not be empty"),
    (["release-fence", "-n", "apps", "--stop-deployment", "flux-system"],
     "'flux-system' is not NAMESPACE/NAME"),
    (["release-fence", "-n", "apps", "--stop-deployment", "a/b/c"],
     "'a/b/c' is not NAMESPACE/NAME"),
])
def test_usage_errors(capsys, kubeconfig, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == cli.Exit.USAGE and out == ""
    assert message in err and "See 'kubectl flux-plunger " in err


def test_a_missing_certificate_authority_file_is_named(capsys, kubeconfig, tmp_path):
    code, _, err = run(capsys, "--certificate-authority", str(tmp_path / "ca.crt"),
                       "status", "-n", "apps")
    assert code == cli.Exit.FAILURE
    assert err == (f"error: unable to read certificate-authority {tmp_path / 'ca.crt'}: "
                   "no such file or directory\n")


# -- version -------------------------------------------------------------------------------

def test_version_client_only_as_yaml(capsys, kubeconfig):
    code, out, _ = run(capsys, "version", "--client", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out) == {"clientVersion": cli.__version__}


def test_version_without_a_configuration_says_why_the_server_is_unknown(
        capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out, _ = run(capsys, "version", "-o", "json")
    info = json.loads(out)
    assert code == 0 and info["clientVersion"] == cli.__version__
    assert info["serverVersion"].startswith("unknown (no configuration has been provided")


# -- status --watch --------------------------------------------------------------------------

def _status_routes(events_per_watch):
    stuck = B.hr("stuck", "apps", conditions=[B.stuck_condition()])
    healthy = B.hr("fine", "apps", conditions=[B.ready_condition()])
    watches = [[e(stuck, healthy) if callable(e) else e for e in w]
               if isinstance(w, list) else w for w in events_per_watch]
    return {
        ("LIST", HRS): [{"metadata": {"resourceVersion": "5"}, "items": []}],
        ("LIST", CLUSTER_LEASES): [{"items": []}],  # status reads every controller Lease
        ("LIST", SECRETS): [{"items": []}],
        ("WATCH", HRS): watches,
    }


def _ev(kind, which):
    return lambda stuck, healthy: {"type": kind,
                                   "object": stuck if which == "stuck" else healthy}


WATCH_THEN_STOP = [
    [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
     _ev("ADDED", "stuck"), _ev("ADDED", "fine"), _ev("MODIFIED", "stuck"),
     _ev("DELETED", "stuck"), {"type": "ERROR", "object": {"code": 410}}],
    K.kube_error(410, "Gone", "too old resource version"),       # a new LIST, then again
    KeyboardInterrupt(),                                          # Ctrl-C ends the watch
]


def test_status_watch_prints_each_change_of_a_release_that_needs_attention(capsys, routed):
    kube = routed(_status_routes(WATCH_THEN_STOP))
    code, out, err = run(capsys, "status", "-n", "apps", "--lease-namespace", "fp",
                         "--watch", "-o", "name")
    assert code == cli.Exit.INTERRUPTED
    assert "No resources found in apps namespace." in err
    # the healthy release never shows; the stuck one on each change, its deletion too
    assert out.splitlines() == ["helmrelease.helm.toolkit.fluxcd.io/stuck"] * 3
    assert kube.sent.count(("WATCH", HRS)) == 3 and kube.sent.count(("LIST", HRS)) == 4


def test_status_watch_as_yaml_separates_documents_and_says_deleted(capsys, routed):
    routed(_status_routes(WATCH_THEN_STOP))
    code, out, _ = run(capsys, "status", "-n", "apps", "--lease-namespace", "fp",
                       "--watch", "-o", "yaml")
    docs = list(yaml.safe_load_all(out))
    assert code == cli.Exit.INTERRUPTED
    assert [d["kind"] for d in docs] == ["HelmReleaseStatusList", "HelmReleaseStatus",
                                         "HelmReleaseStatus", "HelmReleaseStatus"]
    assert docs[-1]["metadata"]["name"] == "stuck" and docs[-1]["state"] == "deleted"


def test_status_watch_table_rows_have_no_header_and_a_named_release_is_followed(
        capsys, routed):
    watch = [[_ev("MODIFIED", "fine"), _ev("MODIFIED", "stuck")], KeyboardInterrupt()]
    routes = _status_routes(watch)
    fine = B.hr("fine", "apps", conditions=[B.ready_condition()])
    routes[("GET", HRS + "/fine")] = [fine]
    routed(routes)
    code, out, err = run(capsys, "status", "-n", "apps", "--lease-namespace", "fp",
                         "--watch", "fine")
    assert code == cli.Exit.INTERRUPTED
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATE"] and lines[1].split()[:2] == ["fine",
                                                                                    "healthy"]
    assert len(lines) == 3 and lines[2].split()[:2] == ["fine", "healthy"]   # not "stuck"


def test_status_watch_stops_on_an_api_error_other_than_gone(capsys, routed):
    routed(_status_routes([K.kube_error(403, "Forbidden", "watch is forbidden")]))
    code, _, err = run(capsys, "status", "-n", "apps", "--lease-namespace", "fp", "-w")
    assert code == cli.Exit.FAILURE and err.endswith("error: Forbidden: watch is forbidden\n")


# -- release-fence ---------------------------------------------------------------------------

def _fenced(name):
    return B.hr(name, "apps", finalizers=[constants.FENCE])


def test_release_fence_client_dry_run_outputs(capsys, routed):
    routes = {("GET", HRS + "/a"): [_fenced("a")],
              ("GET", HRS + "/gone"): [K.kube_error(404, "NotFound", "nf",
                                                    {"details": {"name": "gone"}})]}
    routed(routes)
    code, out, err = run(capsys, "release-fence", "-n", "apps", "--dry-run=client",
                         "--stop-deployment", "fp/ctl", "-o", "yaml", "a", "gone")
    assert code == cli.Exit.FAILURE          # a named release is missing
    assert "would scale Deployment fp/ctl to zero (dry run)" in err
    assert 'Error from server (NotFound): helmreleases.helm.toolkit.fluxcd.io "gone" not found' \
        in err
    doc = yaml.safe_load(out)
    assert doc["dryRun"] == "client"
    assert [(i["metadata"]["name"], i["released"], i["message"]) for i in doc["items"]] == [
        ("a", False, "fenced; would be released")]
    code, out, _ = run(capsys, "release-fence", "-n", "apps", "--dry-run=client", "-o", "name",
                       "a")
    assert code == 0 and out == "helmrelease.helm.toolkit.fluxcd.io/a\n"
    code, out, _ = run(capsys, "release-fence", "-n", "apps", "--dry-run=client", "a")
    assert code == 0 and out.splitlines() == [
        "helmrelease.helm.toolkit.fluxcd.io/a would release the uninstall fence (dry run)",
        "would release 1 fenced HelmReleases (dry run)"]


def test_release_fence_warns_when_stopped_pods_cannot_be_listed(capsys, routed, monkeypatch):
    routed({("LIST", HRS): [{"metadata": {}, "items": []}],
            ("LIST", CLUSTER_LEASES): [{"items": []}]})
    monkeypatch.setattr(stop_verb, "stop", lambda *a, **k: stop_verb.Stopped(
        found=True, pods_unknown=True, selector=""))
    waited = []
    monkeypatch.setattr(stop_verb, "wait_for_pods", lambda *a: waited.append(a))
    code, out, err = run(capsys, "release-fence", "-n", "apps", "--stop-deployment", "fp/ctl")
    assert code == 0
    assert "scaled Deployment fp/ctl to zero" in err
    assert ("warning: could not tell whether flux-plunger pods are still running; "
            "releasing anyway") in err
    assert waited == []            # no selector to wait on: only the second look for fences


def test_release_fence_that_cannot_stop_touches_no_fence(capsys, routed, monkeypatch):
    kube = routed({})

    def refuse(*a, **k):
        raise stop_verb.StopError("could not scale Deployment fp/ctl to zero: forbidden")

    monkeypatch.setattr(stop_verb, "stop", refuse)
    code, _, err = run(capsys, "release-fence", "-n", "apps", "--stop-deployment", "fp/ctl")
    assert code == cli.Exit.FAILURE and kube.sent == []
    assert err == ("error: could not scale Deployment fp/ctl to zero: forbidden; "
                   "no fence was touched\n")


# -- restore -o name --------------------------------------------------------------------------

def test_restore_name_output_only_for_a_restored_secret(capsys, routed, tmp_path):
    secret = storage.make_storage_secret("my-app", "apps", 2, "deployed")
    path = tmp_path / "b.json"
    path.write_bytes(backup.encode(backup.document(
        secret, {"metadata": {"namespace": "apps", "name": "my-app"}}, "local")))
    hr = B.hr("my-app", "apps", suspend=True, managed=[("kubectl", "Update", True)])
    secret_path = SECRETS + "/sh.helm.release.v1.my-app.v2"
    routed({("GET", HRS + "/my-app"): [hr],
            ("GET", secret_path): [K.kube_error(404, "NotFound", "nf",
                                                {"details": {"name": "x"}}), {}],
            ("CREATE", SECRETS): [{}],
            ("LIST", CLUSTER_LEASES): [{"items": []}]})
    code, out, _ = run(capsys, "restore", "-n", "apps", "-o", "name", str(path))
    assert code == 0 and out == "secret/sh.helm.release.v1.my-app.v2\n"
    code, out, err = run(capsys, "restore", "-n", "apps", "-o", "name", str(path))
    assert code == cli.Exit.FAILURE and out == ""          # refused: exists now


# -- main's exit codes -----------------------------------------------------------------------

def _abort_from(cause):
    try:
        raise click.exceptions.Abort() from cause
    except click.exceptions.Abort as exc:
        return exc


@pytest.mark.parametrize(("raised", "code", "err"), [
    (click.exceptions.Abort(), 1, "error: aborted\n"),
    (_abort_from(EOFError()), 1, "error: aborted\n"),
    (_abort_from(KeyboardInterrupt()), 130, ""),       # Ctrl-C, as click hands it on
    (click.ClickException("boom"), 1, "error: boom\n"),
    (SystemExit("message"), 1, ""),
    (SystemExit(None), 0, ""),
    (KeyboardInterrupt(), 130, ""),
    (BrokenPipeError(), 1, ""),
])
def test_main_turns_exceptions_into_exit_codes(capsys, monkeypatch, raised, code, err):
    def boom(**kwargs):
        raise raised

    monkeypatch.setattr(cli.cli, "main", boom)
    assert cli.main(["status"]) == code
    assert capsys.readouterr().err == err


def test_a_frozen_binary_says_what_it_runs_on(capsys, tmp_path, monkeypatch):
    """krew/binary.py writes what the frozen bundle needs (issue 37) into it; ``version``
    (every output) and the fast ``version --client`` path print it; outside a frozen bundle
    (and in one without the file) there is no such line."""
    from kubectl_flux_plunger import entry, frozen

    assert frozen.runs_on() is None
    monkeypatch.setattr("sys._MEIPASS", str(tmp_path), raising=False)
    assert frozen.runs_on() is None
    (tmp_path / frozen.RUNS_ON).write_text("linux/amd64, glibc 2.31 or newer\n")
    assert frozen.runs_on() == "linux/amd64, glibc 2.31 or newer"
    code, out, _ = run(capsys, "version", "--client", "-o", "json")
    assert code == 0 and json.loads(out) == {"clientVersion": cli.__version__,
                                             "runsOn": "linux/amd64, glibc 2.31 or newer"}
    code, out, _ = run(capsys, "version", "--client")
    assert out.splitlines() == [f"Client Version: {cli.__version__}",
                                "Runs On: linux/amd64, glibc 2.31 or newer"]
    fast = entry.fast_answer(["version", "--client"])
    assert fast is not None and fast.splitlines() == out.splitlines()
    assert entry.fast_answer(["--version"]) == cli.__version__
