"""The kube boundary: the error taxonomy, bounded read retries honouring Retry-After, and the
watch-line splitter (linear: one growing buffer, each line cut once)."""
from __future__ import annotations

import json

import pytest

from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.kube import errors as kube_errors
from kubectl_flux_plunger.kube import transport

pytestmark = pytest.mark.unit


@pytest.fixture
def client(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n"
                  "- name: t\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n"
                  "- name: u\n  user: {token: abc}\ncontexts:\n"
                  "- name: t\n  context: {cluster: t, user: u}\n")
    k = K.Kube.from_kubeconfig(str(kc))
    yield k
    k.close()


@pytest.mark.parametrize(("status", "cls"), [
    (0, K.Unreachable), (400, K.BadRequest), (401, K.Unauthorized), (403, K.Forbidden),
    (404, K.NotFound), (409, K.Conflict), (410, K.Gone), (422, K.Invalid),
    (429, K.TooManyRequests), (500, K.ServerError), (503, K.ServerError)])
def test_every_status_has_its_kube_error_subclass(status, cls):
    exc = kube_errors._error_from(status, json.dumps({"message": "m"}).encode()) if status else \
        K.kube_error(0, "Unreachable", "m")
    assert type(exc) is cls and isinstance(exc, K.KubeError) and exc.status == status


def test_retryable_and_changed():
    generic = K.kube_error(422, "Invalid", K.GENERIC_422, {"details": {}})
    assert generic.failed_test_op and generic.changed and generic.retryable
    denied = K.kube_error(422, "Invalid", "admission webhook denied the request",
                          {"details": {"causes": [{"message": "no"}]}})
    assert not denied.failed_test_op and not denied.retryable
    assert K.kube_error(409, "Conflict", "x").changed
    assert K.kube_error(503, "ServiceUnavailable", "x").retryable
    assert not K.kube_error(403, "Forbidden", "x").retryable
    field = K.kube_error(409, "Conflict", "x", {"details": {"causes": [
        {"reason": "FieldManagerConflict", "field": ".spec.suspend"}]}})
    assert isinstance(field, K.Conflict) and field.field_manager_conflict


def test_reads_are_retried_a_bounded_number_of_times_honouring_retry_after(client, monkeypatch):
    answers = [kube_errors._error_from(429, b"{}", "2"), kube_errors._error_from(503, b"{}"), {"ok": True}]
    slept = []
    monkeypatch.setattr(transport.time, "sleep", slept.append)

    def send(*args, **kwargs):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    monkeypatch.setattr(client, "_send", send)
    assert client.request("GET", "GET", "/x") == {"ok": True}
    assert slept == [2.0, 0.4]          # Retry-After, then the backoff of the second retry

    answers[:] = [kube_errors._error_from(500, b"{}") for _ in range(10)]
    slept.clear()
    with pytest.raises(K.ServerError):
        client.request("LIST", "GET", "/x")
    assert len(slept) == K.READ_RETRIES


def test_writes_and_watches_are_never_retried(client, monkeypatch):
    calls = []

    def send(*args, **kwargs):
        calls.append(args[0].verb)
        raise kube_errors._error_from(503, b"{}")
    monkeypatch.setattr(client, "_send", send)
    monkeypatch.setattr(transport.time, "sleep", lambda s: None)
    for verb in ("APPLY", "PATCH", "DELETE", "WATCH"):
        with pytest.raises(K.ServerError):
            client.request(verb, "PATCH", "/x")
    assert calls == ["APPLY", "PATCH", "DELETE", "WATCH"]


def test_a_retry_after_longer_than_the_cap_is_capped():
    exc = kube_errors._error_from(429, b"{}", "3600")
    assert transport._retry_after(exc, 0) == K.MAX_RETRY_AFTER


class _Stream:
    def __init__(self, chunks):
        self.chunks = chunks
        self.released = False

    def stream(self, size, decode_content=True):
        yield from self.chunks

    def release_conn(self):
        self.released = True


def test_watch_lines_split_across_chunks_are_joined(client, monkeypatch):
    events = [{"type": "ADDED", "object": {"n": i, "pad": "x" * 300}} for i in range(50)]
    raw = b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"\n"
    chunks = [raw[i:i + 7] for i in range(0, len(raw), 7)]      # lines cut anywhere
    resp = _Stream(chunks)
    monkeypatch.setattr(client, "open_watch", lambda *a, **k: resp)
    assert list(client.watch_hrs("ns", None, "1")) == events
    assert resp.released


def test_a_kept_error_drops_the_tracebacks_of_its_cause_and_its_context():
    """``kube.kept``: an error raised ``from`` a cause while another was handled keeps none of
    the three tracebacks (each holds a frame), and keeps its message, status and type."""
    def refused():
        try:
            raise ValueError("bad chunk")
        except ValueError as exc:
            why = exc
        try:
            raise OSError("connection reset")
        except OSError:
            raise K.kube_error(403, "Forbidden", "leases is forbidden") from why


    with pytest.raises(K.Forbidden) as caught:
        refused()
    exc = K.kept(caught.value)
    assert exc is caught.value and exc.status == 403 and str(exc) == "leases is forbidden"
    assert isinstance(exc.__cause__, ValueError) and isinstance(exc.__context__, OSError)
    assert [e.__traceback__ for e in (exc, exc.__cause__, exc.__context__)] == [None] * 3
