"""Flux notifications (kubectl_flux_plunger/report/notify.py): the event body against the field set
of github.com/fluxcd/pkg/apis/event v1beta1 ``Event``, severity and metadata keys as
notification-controller reads them, folding of repeats, nothing posted without an address,
a real POST to a loopback HTTP server, and an address that does not answer: one warning
line, never a blocked caller.

The e2e tier runs the real notification-controller (tests/e2e/test_notify_e2e.py)."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import threading

import pytest

from kubectl_flux_plunger.report import notify
from kubectl_flux_plunger.cli.notifier import notifier as _notifier
from kubectl_flux_plunger.report.events import Recorder

from .builders import hr

pytestmark = pytest.mark.unit

RELEASE = hr("web", namespace="apps", uid="uid-7")

# github.com/fluxcd/pkg/apis/event v1beta1 Event, its json tags (v0.17.0 … v0.27.2 alike);
# required ones have no omitempty
V1BETA1_REQUIRED = {
    "involvedObject", "severity", "timestamp", "message", "reason", "reportingController",
}
V1BETA1_OPTIONAL = {"metadata", "reportingInstance"}


class Posts:
    """A ``post`` that records bodies and answers ``status`` (or raises ``error``)."""

    def __init__(self, status: int = 202, error: OSError | None = None) -> None:
        self.status, self.error = status, error
        self.bodies: list[dict] = []
        self.calls = 0

    def __call__(self, address: str, body: bytes, timeout: float) -> int:
        self.calls += 1
        if self.error is not None:
            raise self.error
        self.bodies.append(json.loads(body))
        return self.status


def notifier(post: Posts, **kw) -> notify.Notifier:
    kw.setdefault("backoff", 0.01)
    return notify.Notifier("http://nc.example.invalid/", instance="pod-1", post=post, **kw)


def test_body_is_a_v1beta1_event() -> None:
    body = notify.event_body(RELEASE, "Recovered", "Normal", "Deleted it",
                             {"deletedRevision": "3", "token": "secret-uid"}, instance="pod-1")
    assert set(body) == V1BETA1_REQUIRED | V1BETA1_OPTIONAL
    assert body["involvedObject"] == {
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "namespace": "apps", "name": "web", "uid": "uid-7",
    }
    assert body["severity"] == "info"
    assert body["reason"] == "Recovered" and body["message"] == "Deleted it"
    assert body["reportingController"] == "flux-plunger"
    assert body["reportingInstance"] == "pod-1"
    # metav1.Time: RFC 3339 in UTC, seconds
    assert len(body["timestamp"]) == 20 and body["timestamp"].endswith("Z")
    # notification-controller keeps only keys prefixed with the involved object's group
    assert body["metadata"] == {
        "helm.toolkit.fluxcd.io/releaseName": "web",
        "helm.toolkit.fluxcd.io/deletedRevision": "3",
        "helm.toolkit.fluxcd.io/token": "secret-uid",
    }
    assert all(isinstance(v, str) for v in body["metadata"].values())


def test_warning_is_severity_error_and_release_name_is_helms() -> None:
    named = hr("web", namespace="apps", uid="u", spec_extra={"releaseName": "custom"})
    body = notify.event_body(named, "UninstallFenceHeld", "Warning", "held", instance="i")
    assert body["severity"] == "error"
    assert body["metadata"] == {"helm.toolkit.fluxcd.io/releaseName": "custom"}


@pytest.mark.parametrize("value", [
    "ftp://nc/", "http://", "nc.flux-system:9090", "http://nc:notaport/", "http://nc:0/",
    "http://nc/#frag",
])
def test_bad_addresses_are_refused(value: str) -> None:
    with pytest.raises(ValueError):
        notify.validate_address(value)


@pytest.mark.parametrize("value", [
    notify.DEFAULT_ADDRESS, "http://127.0.0.1:9090", "https://nc.example/events",
])
def test_good_addresses_pass(value: str) -> None:
    assert notify.validate_address(value) == value


def test_repeats_are_folded_and_a_recovery_is_always_posted() -> None:
    post = Posts()
    n = notifier(post)
    for _ in range(3):
        n.notify(RELEASE, "UninstallFenceHeld", "Warning", "held")
    n.notify(RELEASE, "UninstallFenceHeld", "Warning", "held, other words")
    other = hr("api", namespace="apps", uid="uid-8")
    n.notify(other, "UninstallFenceHeld", "Warning", "held")
    n.notify(RELEASE, "Recovered", "Normal", "deleted revision 3")
    n.notify(RELEASE, "Recovered", "Normal", "deleted revision 3")  # a second delete
    n.notify(RELEASE, "UninstallFenceHeld", "Warning", "held")  # a new round after it
    assert n.flush(5)
    got = [(b["involvedObject"]["name"], b["reason"], b["message"]) for b in post.bodies]
    assert got == [
        ("web", "UninstallFenceHeld", "held"),
        ("web", "UninstallFenceHeld", "held, other words"),
        ("api", "UninstallFenceHeld", "held"),
        ("web", "Recovered", "deleted revision 3"),
        ("web", "Recovered", "deleted revision 3"),
        ("web", "UninstallFenceHeld", "held"),
    ]
    assert n.stats == {"sent": 6, "folded": 2}
    n.close()


def test_recorder_hands_each_event_to_the_notifier_with_its_metadata() -> None:
    post = Posts()
    n = notifier(post)
    store = _NoEvents()
    rec = Recorder(store, instance="pod-1", notifier=n)
    rec.record(RELEASE, "RecoveryFailed", "Warning", "failed", metadata={"error": "forbidden"})
    rec.record(RELEASE, "RecoveryFailed", "Warning", "failed", metadata={"error": "forbidden"})
    assert n.flush(5)
    assert len(post.bodies) == 1
    assert post.bodies[0]["severity"] == "error"
    assert post.bodies[0]["metadata"]["helm.toolkit.fluxcd.io/error"] == "forbidden"
    assert store.creates == 1  # the Kubernetes Event is written as before


class _NoEvents:
    def __init__(self) -> None:
        self.creates = 0

    def get_event(self, namespace: str, name: str) -> dict | None:
        return None

    def create_event(self, namespace: str, body: dict) -> dict:
        self.creates += 1
        return body

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return {"count": 2, **patch}


def test_nothing_is_posted_without_an_address_or_on_a_dry_run() -> None:
    assert _notifier(None, "none") is None
    assert _notifier("", "none") is None
    assert _notifier("http://127.0.0.1:9/", "client") is None
    assert _notifier("http://127.0.0.1:9/", "server") is None
    # a disabled recorder (dry run) hands nothing to its notifier
    post = Posts()
    n = notifier(post)
    Recorder(_NoEvents(), enabled=False, notifier=n).record(RELEASE, "Recovered", "Normal", "m")
    assert n.flush(5) and post.calls == 0 and not n.stats


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_address_is_one_warning_and_never_blocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    n = notify.Notifier(f"http://127.0.0.1:{_closed_port()}/", instance="i", backoff=0.01)
    caplog.set_level(logging.INFO, logger="kubectl_flux_plunger.report.notify")
    for i in range(5):
        n.notify(RELEASE, "UninstallFenceHeld", "Warning", f"held {i}")
    assert n.flush(10)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "cannot post Flux events to http://127.0.0.1:" in warnings[0].getMessage()
    assert n.stats == {"unreachable": 5}
    n.close()


def test_the_first_event_is_retried_then_the_address_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    post = Posts(error=ConnectionRefusedError(111, "Connection refused"))
    n = notifier(post, attempts=3)
    caplog.set_level(logging.INFO, logger="kubectl_flux_plunger.report.notify")
    n.notify(RELEASE, "Recovered", "Normal", "one")
    assert n.flush(5)
    assert post.calls == 3  # the bounded retry
    n.notify(RELEASE, "Recovered", "Normal", "two")
    assert n.flush(5)
    assert post.calls == 4  # known unreachable: one attempt per event
    post.error = None
    n.notify(RELEASE, "Recovered", "Normal", "three")
    assert n.flush(5)
    assert [b["message"] for b in post.bodies] == ["three"]
    levels = [(r.levelno, r.getMessage().split(" ")[0]) for r in caplog.records]
    assert [lv for lv, _ in levels] == [logging.WARNING, logging.INFO]
    n.close()


def test_notify_returns_at_once_while_posting_hangs_and_drops_past_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = threading.Event()

    def hanging(address: str, body: bytes, timeout: float) -> int:
        gate.wait(10)
        return 202

    n = notify.Notifier("http://nc.example.invalid/", instance="i", post=hanging, max_queued=2)
    for i in range(6):  # one in flight, two queued, three dropped
        n.notify(RELEASE, "UninstallFenceHeld", "Warning", f"held {i}")
    assert not n.flush(0.05)
    gate.set()
    assert n.flush(5)
    assert n.stats["dropped"] >= 3 and n.stats["sent"] + n.stats["dropped"] == 6
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 1
    n.close()


def test_rate_limited_and_refused_answers_are_not_retried() -> None:
    post = Posts(status=429)
    n = notifier(post)
    n.notify(RELEASE, "Recovered", "Normal", "one")
    assert n.flush(5)
    post.status = 400
    n.notify(RELEASE, "Recovered", "Normal", "two")
    assert n.flush(5)
    assert post.calls == 2
    assert n.stats == {"rate-limited": 1, "refused": 1}
    n.close()


def test_a_real_post_reaches_a_loopback_server() -> None:
    got: list[tuple[str, str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            got.append((self.path, self.headers["Content-Type"],
                        json.loads(self.rfile.read(length))))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        n = notify.Notifier(f"http://127.0.0.1:{server.server_address[1]}/", instance="i")
        n.notify(RELEASE, "Recovered", "Normal", "deleted")
        assert n.flush(10)
        n.close()
    finally:
        server.shutdown()
        server.server_close()
    assert len(got) == 1
    path, ctype, body = got[0]
    assert path == "/" and ctype == "application/json"
    assert body["involvedObject"]["name"] == "web" and n.stats == {"sent": 1}


@pytest.mark.parametrize("verb", ["serve", "recover", "resume-owned", "release-fence"])
def test_a_bad_events_addr_is_a_usage_error(verb: str, capsys: pytest.CaptureFixture) -> None:
    from kubectl_flux_plunger.cli import main

    assert main([verb, "--events-addr", "ftp://nc/"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'ftp://nc/' is not an http:// or https:// URL" in err


def test_a_broken_notifier_never_fails_the_recorder(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def notify(self, *args: object) -> None:
            raise RuntimeError("bug")

    store = _NoEvents()
    Recorder(store, notifier=Broken()).record(RELEASE, "Recovered", "Normal", "m")
    assert store.creates == 1
    assert any("could not queue a Flux notification" in r.getMessage() for r in caplog.records)
