"""``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP.

* ``/healthz``: 200 while the process runs (the serving thread itself is the liveness proof).
* ``/readyz``: 200 once the initial LIST has been enqueued and the watch started — for
  followers too (a follower is a ready hot standby); 503 before.
* ``/metrics``: the Prometheus text exposition of :mod:`.metrics` plus process metrics.

Bind addresses follow controller-runtime: ``:8080`` (every interface), ``host:port``,
``[v6]:port``; ``0`` disables the endpoint.  When metrics and probes share an address, one
server answers all three paths.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .metrics import Metrics
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)


class BindError(Exception):
    pass


def parse_bind_address(value: str, flag: str) -> tuple[str, int] | None:
    """``":8080"`` → ("", 8080); ``"0"`` → None (disabled).  Raises ValueError."""
    text = (value or "").strip()
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"invalid {flag} {value!r}: use HOST:PORT, :PORT or 0 to disable")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"invalid {flag} {value!r}: port must be a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"invalid {flag} {value!r}: port out of range")
    return host, number


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, family: int
    ) -> None:
        self.address_family = family
        super().__init__(address, handler)


class Endpoints:
    """The HTTP servers of one ``serve`` process."""

    def __init__(
        self, *, ready: Callable[[], bool], render_metrics: Callable[[], tuple[bytes, str]] | None
    ) -> None:
        self.ready = ready
        self.render_metrics = render_metrics
        self.servers: list[_Server] = []

    def _handler(self, paths: frozenset[str]) -> type[BaseHTTPRequestHandler]:
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in paths:
                    return self._send(404, b"404 page not found\n")
                if path == "/healthz":
                    return self._send(200, b"ok")
                if path == "/readyz":
                    if endpoints.ready():
                        return self._send(200, b"ok")
                    return self._send(503, b"not ready: HelmRelease list/watch not synced yet")
                render = endpoints.render_metrics
                if render is None:  # not started with a metrics address
                    return self._send(404, b"404 page not found\n")
                try:
                    body, ctype = render()
                except Exception as exc:  # noqa: BLE001 - a scrape must never kill the server
                    log.warning("rendering metrics failed: %s", exc)
                    return self._send(500, b"metrics unavailable\n")
                return self._send(200, body, ctype)

            def _send(
                self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8"
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet access log
                log.debug("http %s", format % args)

        return Handler

    def start(
        self, metrics_addr: tuple[str, int] | None, probe_addr: tuple[str, int] | None
    ) -> None:
        wanted: dict[tuple[str, int], set[str]] = {}
        if metrics_addr is not None:
            wanted.setdefault(metrics_addr, set()).add("/metrics")
        if probe_addr is not None:
            wanted.setdefault(probe_addr, set()).update({"/healthz", "/readyz"})
        for (host, port), paths in wanted.items():
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            bind_host = host or ("::" if family == socket.AF_INET6 else "0.0.0.0")
            try:
                server = _Server((bind_host, port), self._handler(frozenset(paths)), family=family)
            except OSError as exc:
                self.stop()
                raise BindError(
                    f"cannot listen on {host or '*'}:{port} for "
                    f"{', '.join(sorted(paths))}: {exc.strerror or exc}"
                ) from None
            self.servers.append(server)
            threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
            log.info(
                "serving %s on %s:%d",
                " ".join(sorted(paths)),
                host or "*",
                server.server_address[1],
            )

    def stop(self) -> None:
        for server in self.servers:
            try:
                server.shutdown()
                server.server_close()
            except Exception:  # noqa: BLE001
                pass
        self.servers = []


def prometheus_renderer(metrics: Metrics) -> Callable[[], tuple[bytes, str]]:
    """Build the /metrics renderer (imports prometheus-client; ImportError when missing)."""
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        PlatformCollector,
        ProcessCollector,
        generate_latest,
    )

    from .metrics import collector

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(collector(metrics))

    def render() -> tuple[bytes, str]:
        return generate_latest(registry), CONTENT_TYPE_LATEST

    return render
