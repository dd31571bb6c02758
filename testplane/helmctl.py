"""The real Flux helm-controller as a local process, fed by a chart served on loopback.

No source-controller: the test publishes the chart through an ExternalArtifact whose
``status.artifact`` points at a loopback HTTP server (helm-controller's
``ExternalArtifact`` feature gate).  Charts hold ConfigMaps (there is no kubelet), and on
request hook Jobs that never finish: no job controller runs in the test control plane (and
their image cannot be pulled where one does), so Helm waits on them until its timeout —
what a hook that fails, hangs or is blocked by a webhook does in a real cluster.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import io
import os
import signal
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import binaries
from .plane import Process, free_port, wait_for

CHART_YAML = """apiVersion: v2
name: {name}
version: {version}
description: flux-plunger test chart (ConfigMaps only)
"""

CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-cm
data:
  release: {{ .Release.Name | quote }}
  value: {{ .Values.value | default "one" | quote }}
"""


# A Helm hook Job for the event HOOK-EVENT (post-install, pre-delete, post-upgrade, …), named
# after the release and the event and labelled with the chart version that rendered it.  It
# never completes on its own (see the module's docstring); complete_hook_job() finishes it.
HOOK_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-HOOK-EVENT
  labels:
    chart-version: {{ .Chart.Version | quote }}
  annotations:
    helm.sh/hook: HOOK-EVENT
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: hook
          image: hook.invalid/never-runs:{{ .Chart.Version }}
"""


def build_chart(directory: Path, name: str = "demo", version: str = "0.1.0",
                hooks: tuple[str, ...] = ()) -> Path:
    """Write ``<name>-<version>.tgz`` (one top-level dir, Chart.yaml + a ConfigMap, and one
    :data:`HOOK_JOB` per Helm hook event in ``hooks``)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{name}-{version}.tgz"
    files = {f"{name}/Chart.yaml": CHART_YAML.format(name=name, version=version),
             f"{name}/values.yaml": "value: one\n",
             f"{name}/templates/configmap.yaml": CONFIGMAP}
    for event in hooks:
        files[f"{name}/templates/hook-{event}.yaml"] = HOOK_JOB.replace("HOOK-EVENT", event)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 1700000000
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    out.write_bytes(buf.getvalue())
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


class ChartServer:
    """A loopback HTTP server for chart tarballs."""

    def __init__(self, directory: Path):
        self.directory = directory
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "ChartServer":
        self.thread.start()
        return self

    def url(self, filename: str) -> str:
        return f"http://127.0.0.1:{self.port}/{filename}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def publish_chart(kube, namespace: str, name: str, chart: Path, server: ChartServer,
                  revision: str = "0.1.0") -> None:
    """Create ExternalArtifact ``namespace/name`` and write its status artifact: ``chart``
    (a file in ``server``'s directory or below it) as ``revision``.  Again on an existing
    one, it publishes a new revision: helm-controller reconciles the HelmReleases using it."""
    from kubectl_flux_plunger.kube import APPLY_PATCH, MERGE_PATCH
    base = f"/apis/source.toolkit.fluxcd.io/v1/namespaces/{namespace}/externalartifacts"
    kube.request("APPLY", "PATCH", f"{base}/{name}", content_type=APPLY_PATCH,
                 query={"fieldManager": "testplane", "force": "true"},
                 body={"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {}})
    data = chart.read_bytes()
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.request("PATCH", "PATCH", f"{base}/{name}/status", content_type=MERGE_PATCH,
                 body={"status": {"artifact": {
                     "path": chart.name, "revision": revision,
                     "url": server.url(chart.relative_to(server.directory).as_posix()),
                     "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
                     "lastUpdateTime": now, "size": len(data)}}})


def helmrelease(namespace: str, name: str, artifact: str, **spec) -> dict:
    """A HelmRelease body using ``chartRef`` to an ExternalArtifact."""
    body = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"interval": "1m",
                     "chartRef": {"kind": "ExternalArtifact", "name": artifact},
                     "install": {"disableWait": True}, "upgrade": {"disableWait": True},
                     "uninstall": {"disableWait": True}}}
    body["spec"].update(spec)
    return body


class HelmController:
    """helm-controller running out of cluster with ``KUBECONFIG`` in its environment."""

    def __init__(self, kubeconfig: Path, workdir: Path, *, label_selector: str | None = None):
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.label_selector = label_selector
        self.process: Process | None = None

    def start(self) -> "HelmController":
        binary = binaries.ensure("helm-controller")
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        health = free_port()
        argv = [str(binary), "--metrics-addr=0", f"--health-addr=127.0.0.1:{health}",
                "--feature-gates=ExternalArtifact=true", "--http-retry=1",
                "--requeue-dependency=2s", "--min-retry-delay=500ms", "--max-retry-delay=3s",
                "--log-encoding=console", "--graceful-shutdown-timeout=5s",
                "--concurrent=4"]
        if self.label_selector:
            argv.append(f"--watch-label-selector={self.label_selector}")
        self.process = Process("helm-controller", argv, self.workdir / "helm-controller.log", env)
        self.process.start()
        import urllib.request

        def healthy():
            self.process.check()
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                return r.status == 200
        wait_for(healthy, 90, "helm-controller /readyz", interval=0.25)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def pause(self) -> None:
        """SIGSTOP: helm-controller sees nothing until :meth:`resume` (ordering tests)."""
        self.process.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.proc.send_signal(signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self):
        self.pause()
        try:
            yield
        finally:
            self.resume()

    @property
    def version(self) -> str:
        return binaries.version("helm-controller")


def break_release(kube, namespace: str, release: str, status: str = "uninstalling") -> str:
    """Rewrite the newest storage revision to ``status`` (payload and label), as an
    interrupted ``helm uninstall`` leaves it; returns the Secret's name."""
    from kubectl_flux_plunger.core import storage
    from kubectl_flux_plunger.kube import JSON

    secrets = kube.list_secrets(namespace, storage.label_selector(release))
    newest = max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))
    payload = storage.decode_payload(newest)
    payload["info"]["status"] = status
    payload["info"]["description"] = "Deletion in progress (or silently failed)"
    newest["data"]["release"] = storage.encode_payload(payload)
    newest["metadata"]["labels"]["status"] = status
    name = newest["metadata"]["name"]
    kube.request("UPDATE", "PUT", f"/api/v1/namespaces/{namespace}/secrets/{name}",
                 body=newest, content_type=JSON)
    return name


def request_reconcile(kube, namespace: str, name: str) -> str:
    """What ``flux reconcile hr`` does: bump the requestedAt annotation.  Returns the stamp,
    which helm-controller copies to ``status.lastHandledReconcileAt`` at the end of the
    reconcile that handled it (whatever its result)."""
    from kubectl_flux_plunger.kube import MERGE_PATCH, hr_path
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.request("PATCH", "PATCH", hr_path(namespace, name), content_type=MERGE_PATCH,
                 body={"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": stamp}}},
                 query={"fieldManager": "flux-client-side-apply"})
    return stamp


def is_ready(hr: dict | None) -> bool:
    return (ready(hr) or ("",))[0] == "True"


def ready(hr: dict | None) -> tuple[str, str, str] | None:
    """(status, reason, message) of the Ready condition."""
    return condition(hr, "Ready")


def condition(hr: dict | None, kind: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of the condition of type ``kind`` (Released, Remediated…)."""
    for c in (hr or {}).get("status", {}).get("conditions", []):
        if c.get("type") == kind:
            return c.get("status"), c.get("reason", ""), c.get("message", "")
    return None


def complete_hook_job(kube, namespace: str, name: str) -> dict:
    """Finish Job ``namespace/name`` as the job controller would when its one Pod succeeded
    (``succeeded: 1``, ``SuccessCriteriaMet`` then ``Complete``); returns the Job.  For a test
    that needs a hook Helm is waiting on to succeed (the test control plane has no job
    controller)."""
    from kubectl_flux_plunger.kube import MERGE_PATCH
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = {"status": "True", "reason": "CompletionsReached", "lastProbeTime": now,
            "lastTransitionTime": now, "message": "Reached expected number of succeeded pods"}
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"
    status = {"startTime": now, "completionTime": now, "succeeded": 1, "ready": 0,
              "terminating": 0, "conditions": [{"type": "SuccessCriteriaMet", **done},
                                               {"type": "Complete", **done}]}
    return kube.request("PATCH", "PATCH", path, content_type=MERGE_PATCH,
                        body={"status": status})

