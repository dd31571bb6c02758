"""The real Flux notification-controller as a local process, and a loopback HTTP receiver a
``generic`` Provider posts to.

notification-controller (built from its Go module by :mod:`testplane.binaries`) runs out of
cluster with ``KUBECONFIG`` in its environment, leader election off (its default), its
event listener, health and webhook-receiver addresses on loopback ports, metrics off.  Its
CRDs (Alert, Provider and the Receiver its manager watches) come from the module's
``config/crd/bases`` (:func:`binaries.notification_crd_dir`).

It reads Alerts and Providers from an informer cache, so an Alert created just now may not
match yet: :func:`ready_route` posts probe events until one reaches the receiver, after
which the Alert and Provider are known to be in effect.
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import binaries
from .plane import Process, free_port, wait_for

NOTIFICATION = "notification.toolkit.fluxcd.io/v1beta3"
PROBE_REASON = "NotificationProbe"


class NotificationController:
    def __init__(self, kubeconfig: Path, workdir: Path):
        self.kubeconfig, self.workdir = kubeconfig, workdir
        self.events_port = free_port()
        self.process: Process | None = None

    @property
    def address(self) -> str:
        """What flux-plunger's ``--events-addr`` is set to."""
        return f"http://127.0.0.1:{self.events_port}/"

    def start(self) -> "NotificationController":
        binary = binaries.ensure("notification-controller")
        health, receiver = free_port(), free_port()
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        argv = [str(binary), f"--events-addr=127.0.0.1:{self.events_port}",
                f"--health-addr=127.0.0.1:{health}", f"--receiverAddr=127.0.0.1:{receiver}",
                "--metrics-addr=0", "--log-encoding=console", "--log-level=debug",
                # its duplicate filter would hide a duplicate flux-plunger posted; the
                # tests count what flux-plunger sends itself
                "--rate-limit-interval=1ms"]
        self.process = Process("notification-controller", argv,
                               self.workdir / "notification-controller.log", env)
        self.process.start()

        def healthy():
            self.process.check()
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                return r.status == 200
        wait_for(healthy, 90, "notification-controller /readyz", interval=0.25)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def log(self) -> str:
        if self.process is None:
            return ""
        return self.process.log.read_text(errors="replace")


class Receiver:
    """A loopback HTTP server collecting the JSON bodies POSTed to it (a ``generic``
    Provider's address)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsable": raw.decode(errors="replace")}
                with receiver._lock:
                    receiver.bodies.append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def received(self, *, probes: bool = False) -> list[dict]:
        with self._lock:
            got = list(self.bodies)
        return [b for b in got if probes or b.get("reason") != PROBE_REASON]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def apply_route(kube, namespace: str, receiver_url: str, *, severity: str = "info") -> None:
    """A ``generic`` Provider posting to ``receiver_url`` and an Alert on every HelmRelease
    in ``namespace``."""
    from kubectl_flux_plunger.kube import APPLY_PATCH
    base = f"/apis/{NOTIFICATION}/namespaces/{namespace}"
    for plural, kind, spec in (
            ("providers", "Provider", {"type": "generic", "address": receiver_url}),
            ("alerts", "Alert", {"providerRef": {"name": "receiver"}, "eventSeverity": severity,
                                 "eventSources": [{"kind": "HelmRelease", "name": "*"}]})):
        kube.request("APPLY", "PATCH", f"{base}/{plural}/receiver", content_type=APPLY_PATCH,
                     query={"fieldManager": "testplane", "force": "true"},
                     body={"apiVersion": NOTIFICATION, "kind": kind,
                           "metadata": {"name": "receiver", "namespace": namespace},
                           "spec": spec})


def ready_route(nc: NotificationController, receiver: Receiver, namespace: str,
                timeout: float = 60) -> None:
    """Post probe events (a HelmRelease ``probe`` in ``namespace``) to notification-controller
    until one reaches ``receiver``: its cache then holds the Alert and the Provider."""
    sent = [0]

    def through() -> bool:
        if receiver.received(probes=True):
            return True
        sent[0] += 1
        body = {"involvedObject": {"apiVersion": "helm.toolkit.fluxcd.io/v2",
                                   "kind": "HelmRelease", "namespace": namespace,
                                   "name": "probe"},
                "severity": "info", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()),
                "message": f"probe {sent[0]}", "reason": PROBE_REASON,
                "reportingController": "testplane"}
        req = urllib.request.Request(nc.address, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=5).close()
        except (urllib.error.URLError, OSError):
            pass
        # the notification is dispatched in the background: give it a moment to arrive
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if receiver.received(probes=True):
                return True
            time.sleep(0.05)
        return False

    wait_for(through, timeout, "notification-controller to route a probe event to the receiver",
             interval=0.1)
