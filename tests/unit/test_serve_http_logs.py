"""serve's plumbing without a cluster: the /healthz, /readyz and /metrics endpoints on a
loopback port, and the two log formats."""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.error
import urllib.request

import pytest

from kubectl_flux_plunger.serve import logs
from kubectl_flux_plunger.serve.health import BindError, Endpoints, prometheus_renderer
from kubectl_flux_plunger.serve.metrics import Metrics

pytestmark = pytest.mark.unit

LOOPBACK = ("127.0.0.1", 0)


def get(endpoints: Endpoints, path: str, server: int = 0) -> tuple[int, str, str]:
    port = endpoints.servers[server].server_address[1]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


class Probe:
    def __init__(self) -> None:
        self.ready = False

    def __call__(self) -> bool:
        return self.ready


@pytest.fixture(scope="module")
def served():
    """One server for probes and metrics, one for metrics only, one for probes only
    (each test sets readiness and the renderer it needs; stopping costs up to 0.5 s)."""
    probe = Probe()
    e = Endpoints(ready=probe, render_metrics=None)
    e.start(LOOPBACK, LOOPBACK)                 # the same address: one server, three paths
    e.start(LOOPBACK, None)
    e.start(None, LOOPBACK)
    yield e, probe
    # stop() shuts the servers down one after another, each waiting for serve_forever's next
    # 0.5 s poll: ask them all at once first (stop() then finds each one stopped)
    asking = [threading.Thread(target=server.shutdown) for server in e.servers]
    for thread in asking:
        thread.start()
    for thread in asking:
        thread.join(timeout=10)
    e.stop()
    assert e.servers == []


def test_probes_and_metrics_on_one_address(served):
    e, probe = served
    metrics = Metrics()
    metrics.relisted("initial")
    e.render_metrics = prometheus_renderer(metrics)
    probe.ready = False
    assert get(e, "/healthz")[::2] == (200, "ok")
    assert get(e, "/readyz")[::2] == (503, "not ready: HelmRelease list/watch not synced yet")
    probe.ready = True
    assert get(e, "/readyz")[::2] == (200, "ok")
    code, ctype, body = get(e, "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=")
    assert 'flux_plunger_relists_total{reason="initial"} 1.0' in body
    assert get(e, "/nothing")[0] == 404


def test_separate_addresses_serve_only_their_paths(served):
    e, probe = served
    probe.ready = True
    e.render_metrics = lambda: (b"m 1\n", "text/plain")
    assert len(e.servers) == 3
    assert get(e, "/metrics", server=1)[::2] == (200, "m 1\n")
    assert get(e, "/healthz", server=1)[0] == 404
    assert get(e, "/healthz", server=2)[::2] == (200, "ok")
    assert get(e, "/metrics", server=2)[0] == 404


def test_a_failing_renderer_answers_500_and_the_server_lives_on(served):
    e, _ = served

    def broken() -> tuple[bytes, str]:
        raise RuntimeError("collector crashed")

    e.render_metrics = broken
    assert get(e, "/metrics")[::2] == (500, "metrics unavailable\n")
    e.render_metrics = lambda: (b"ok 1\n", "text/plain")
    assert get(e, "/metrics")[::2] == (200, "ok 1\n")


def test_metrics_without_a_renderer_is_not_found(served):
    e, _ = served
    e.render_metrics = None
    assert get(e, "/metrics")[0] == 404


def test_a_taken_port_is_a_bind_error_naming_it(served):
    port = served[0].servers[0].server_address[1]
    second = Endpoints(ready=lambda: True, render_metrics=None)
    with pytest.raises(BindError, match=f"cannot listen on 127.0.0.1:{port} for "
                                        "/healthz, /readyz"):
        second.start(None, ("127.0.0.1", port))
    assert second.servers == []


# -- logs ---------------------------------------------------------------------------------

def emit(fmt: str, level: str, *calls) -> str:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logs.setup(fmt, level, stream)
        for logger, lvl, msg, args, kw in calls:
            logging.getLogger(logger).log(lvl, msg, *args, **kw)
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    return stream.getvalue()


def test_json_lines_carry_the_fields():
    out = emit("json", "info",
               ("kubectl_flux_plunger.serve", logging.INFO, "recovered: %s", ("apps/web",),
                {"extra": logs.fields(release="apps/web", revision=3, msg="not overwritten")}),
               ("kubectl_flux_plunger.serve", logging.DEBUG, "hidden", (), {}))
    (line,) = out.splitlines()
    record = json.loads(line)
    assert record["msg"] == "recovered: apps/web"
    assert record["level"] == "info" and record["logger"] == "kubectl_flux_plunger.serve"
    assert record["release"] == "apps/web" and record["revision"] == 3
    assert record["ts"].endswith("Z") and len(record["ts"]) == len("2026-12-01T05:00:00.000Z")


def test_text_lines_quote_what_needs_quoting_and_keep_tracebacks():
    try:
        raise ValueError("boom")
    except ValueError:
        out = emit("text", "debug",
                   ("x", logging.WARNING, "watch failed", (),
                    {"extra": logs.fields(detail="two words", empty="", plain="a=b", n=1),
                     "exc_info": True}))
    first, *rest = out.splitlines()
    assert " WARNING watch failed " in first
    assert first.endswith('detail="two words" empty="" plain="a=b" n=1')
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"


def test_json_keeps_tracebacks_and_the_http_libraries_stay_quiet():
    try:
        raise KeyError("k")
    except KeyError:
        out = emit("json", "debug", ("x", logging.ERROR, "failed", (), {"exc_info": True}),
                   ("urllib3.connectionpool", logging.INFO, "chatty", (), {}))
    (line,) = out.splitlines()
    assert "KeyError: 'k'" in json.loads(line)["error"]
