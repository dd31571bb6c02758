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

    def __init__(self, kubeconfig: Path, workdir: Path, *, label_selector: str | None = None,
                 extra_args: tuple[str, ...] = (), binary: Path | None = None):
        self.kubeconfig = kubeconfig
        self.binary = binary  # another version's binary; default: the one the suite runs
        self.workdir = workdir
        self.label_selector = label_selector
        self.extra_args = tuple(extra_args)  # e.g. Flux's multi-tenancy lockdown flags
        self.process: Process | None = None

    def start(self) -> "HelmController":
        binary = self.binary or binaries.ensure("helm-controller")
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        health = free_port()
        argv = [str(binary), "--metrics-addr=0", f"--health-addr=127.0.0.1:{health}",
                "--feature-gates=ExternalArtifact=true", "--http-retry=1",
                "--requeue-dependency=2s", "--min-retry-delay=500ms", "--max-retry-delay=3s",
                "--log-encoding=console", "--graceful-shutdown-timeout=5s",
                "--concurrent=4"]
        if self.label_selector:
            argv.append(f"--watch-label-selector={self.label_selector}")
        argv.extend(self.extra_args)
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


# -- the StateError face of a stuck release (issue 47), from real failures ------------------
# A hook Job that never finishes fails a release action after the HelmRelease's timeout;
# helm-controller's remediation then runs a Helm uninstall, which records the newest revision
# `uninstalling` (storage, and through its observer status.history) before running the
# pre-delete hook, and fails on that hook.  The history's digest now verifies against an
# `uninstalling` revision: every reconcile after it ends in DetermineReleaseState's default
# branch (internal/reconcile/state.go), Ready=False reason StateError, for ever.

# spec.timeout and spec.uninstall.timeout of the scenarios: how long each hook is waited on
# (measured on helm-controller v1.6.4: 2s, each helper below returns ~17 s after it starts;
# 5s, ~23 s).  A shorter one changes where the failing action fails, never whether.
HOOK_TIMEOUT = "2s"
FIXED_VERSION = "1.0.0"  # the chart version without blocking hooks, for a heal
STATE_ERROR = ("Could not determine release state: unable to determine state for release "
               "with status 'uninstalling'")


def publish_version(kube, namespace: str, name: str, server: ChartServer, version: str,
                    hooks: tuple[str, ...] = ()) -> Path:
    """Build chart ``name`` ``version`` with hook Jobs for ``hooks`` (:func:`build_chart`)
    into ``server``'s directory for ``namespace`` (its own: a chart of another test never
    changes under a release) and publish it as ExternalArtifact ``namespace/name`` — the
    first revision, or a new one for the HelmRelease already using it.  Returns the file."""
    chart = build_chart(server.directory / namespace, name, version, hooks)
    publish_chart(kube, namespace, name, chart, server, revision=version)
    return chart


def release_statuses(kube, namespace: str, release: str) -> dict[int, str]:
    """``{revision: Helm status}`` of the release's storage Secrets: the decoded payload's
    ``info.status``, followed by `` (label:…)`` where the Secret's status label says other."""
    from kubectl_flux_plunger.core import storage

    out = {}
    for secret in kube.list_secrets(namespace, storage.label_selector(release)):
        labels = secret["metadata"]["labels"]
        status = storage.decode_payload(secret)["info"]["status"]
        out[int(labels["version"])] = status if labels.get("status") == status \
            else f"{status} (label:{labels.get('status')})"
    return out


def latest_snapshot(hr: dict | None) -> dict:
    """``status.history[0]``, helm-controller's record of the newest release it acted on."""
    return (((hr or {}).get("status") or {}).get("history") or [{}])[0]


def hooked_release(namespace: str, name: str, *, timeout: str = HOOK_TIMEOUT,
                   **remediation) -> dict:
    """:func:`helmrelease` for the hooked charts: ``spec.timeout`` and
    ``spec.uninstall.timeout`` ``timeout``, and ``install``/``upgrade`` remediation as given
    (``install={"retries": 1}``, ``upgrade={"retries": 1, "strategy": "uninstall"}``)."""
    body = helmrelease(namespace, name, name, timeout=timeout)
    spec = body["spec"]
    spec["uninstall"]["timeout"] = timeout
    for action, settings in remediation.items():
        spec[action]["remediation"] = settings
    return body


def _wait_hr(kube, namespace: str, name: str, check, deadline: float, what: str) -> dict:
    """Poll the HelmRelease until ``check(hr)``; the timeout names its last state."""
    seen: list = [None]

    def reached():
        seen[0] = kube.get_hr(namespace, name)
        return seen[0] if seen[0] is not None and check(seen[0]) else None
    try:
        return wait_for(reached, deadline, f"{namespace}/{name} {what}", interval=0.25)
    except TimeoutError as exc:
        hr = seen[0]
        raise TimeoutError(f"{exc}; last seen: Ready {ready(hr)}, Remediated "
                           f"{condition(hr, 'Remediated')}, history[0] {latest_snapshot(hr)}, "
                           f"storage {release_statuses(kube, namespace, name)}") from None


def wait_released(kube, namespace: str, name: str, revision: int, version: str,
                  deadline: float = 240) -> dict:
    """Until helm-controller reports Ready=True with revision ``revision`` of chart
    ``version`` as the newest in its history; returns the HelmRelease."""
    def released(hr):
        snap = latest_snapshot(hr)
        return (is_ready(hr) and snap.get("version") == revision
                and snap.get("chartVersion") == version and snap.get("status") == "deployed")
    return _wait_hr(kube, namespace, name, released, deadline,
                    f"Ready=True with revision {revision} (chart {version}) deployed")


def wait_state_error(kube, namespace: str, name: str, revision: int,
                     deadline: float = 240) -> dict:
    """Until helm-controller reports Ready=False StateError with revision ``revision``
    ``uninstalling`` both in storage (newest) and as its history's newest; returns the
    HelmRelease."""
    def stuck(hr):
        if ready(hr) != ("False", "StateError", STATE_ERROR):
            return False
        snap = latest_snapshot(hr)
        if (snap.get("version"), snap.get("status")) != (revision, "uninstalling"):
            return False
        statuses = release_statuses(kube, namespace, name)
        return max(statuses, default=None) == revision and statuses[revision] == "uninstalling"
    return _wait_hr(kube, namespace, name, stuck, deadline,
                    f"Ready=False StateError with revision {revision} uninstalling")


def stuck_install_remediation(kube, namespace: str, name: str, server: ChartServer, *,
                              timeout: str = HOOK_TIMEOUT, deadline: float = 240) -> dict:
    """Scenario 1: chart 0.1.0 with a post-install and a pre-delete hook that never finish,
    installed with ``install.remediation.retries: 1``: the install fails on its post-install
    hook, the remediation's uninstall on its pre-delete hook.  Returns the HelmRelease once
    it is stuck: revision 1 ``uninstalling`` (storage and history), Ready=False StateError."""
    from .cluster import Cluster

    publish_version(kube, namespace, name, server, "0.1.0", ("post-install", "pre-delete"))
    Cluster(kube).apply(hooked_release(namespace, name, timeout=timeout,
                                       install={"retries": 1}),
                        manager="kustomize-controller")
    return wait_state_error(kube, namespace, name, 1, deadline)


def stuck_upgrade_remediation(kube, namespace: str, name: str, server: ChartServer, *,
                              good_upgrades: int = 0, timeout: str = HOOK_TIMEOUT,
                              deadline: float = 240) -> dict:
    """Scenarios 2 and 3: with ``upgrade.remediation`` ``{retries: 1, strategy: uninstall}``,
    chart 0.1.0 (a pre-delete hook only: it runs on no install or upgrade) installs as
    revision 1; ``good_upgrades`` more such versions (0.2.0, …) upgrade to revisions 2, …;
    then version 0.<n>.0 adds a post-upgrade hook: the upgrade to revision n fails on it, the
    uninstall remediation on the pre-delete hook.  Returns the HelmRelease once it is stuck:
    revision n ``uninstalling`` (storage and history), revision n-1 ``deployed``, Ready=False
    StateError."""
    from .cluster import Cluster

    failing = good_upgrades + 2
    for revision in range(1, failing + 1):
        version = f"0.{revision}.0"
        hooks = ("post-upgrade", "pre-delete") if revision == failing else ("pre-delete",)
        publish_version(kube, namespace, name, server, version, hooks)
        if revision == 1:
            Cluster(kube).apply(hooked_release(namespace, name, timeout=timeout, upgrade={
                "retries": 1, "strategy": "uninstall"}), manager="kustomize-controller")
        if revision < failing:
            wait_released(kube, namespace, name, revision, version, deadline)
    return wait_state_error(kube, namespace, name, failing, deadline)


NAME_IN_USE = ("cannot reuse a name that is still in use", "cannot re-use a name that is still in use")


def wait_name_in_use(kube, namespace: str, name: str, revision: int, *, chart: str | None = None,
                     deadline: float = 240) -> dict:
    """Until helm-controller reports Ready=False with Helm's name check ("cannot reuse a
    name that is still in use", from chart ``chart`` — ``name@version`` — when given) and
    revision ``revision`` ``uninstalled`` is the newest in storage; returns the HelmRelease."""
    def stuck(hr):
        status, _, message = ready(hr) or ("", "", "")
        if status != "False" or not any(m in message for m in NAME_IN_USE):
            return False
        if chart is not None and f"with chart {chart}:" not in message:
            return False
        statuses = release_statuses(kube, namespace, name)
        return max(statuses, default=None) == revision and statuses[revision] == "uninstalled"
    return _wait_hr(kube, namespace, name, stuck, deadline,
                    f"Ready=False 'cannot reuse a name' with revision {revision} uninstalled")


def stuck_keep_history(kube, namespace: str, name: str, server: ChartServer, *,
                       upgrade: bool = False, timeout: str = HOOK_TIMEOUT,
                       deadline: float = 240) -> dict:
    """Issue 56's face 3, from real failures: ``spec.uninstall.keepHistory: true`` and a
    remediation whose uninstall succeeds (no pre-delete hook) and keeps the history.

    * install (``upgrade`` False): chart 0.1.0 with a post-install hook that never finishes,
      ``install.remediation.retries: 1``: the install fails, the remediation uninstalls:
      revision 1 ``uninstalled``;
    * upgrade: chart 0.1.0 (no hooks) installs as revision 1; 0.2.0 adds a post-upgrade
      hook: the upgrade fails, ``upgrade.remediation {retries: 1, strategy: uninstall}``
      uninstalls revision 2: v2 ``uninstalled`` over v1 ``superseded`` (Helm v4's
      uninstall supersedes every deployed revision) or ``deployed`` (Helm v3.19,
      helm-controller v1.4.3).

    Either way helm-controller then installs (Absent) and Helm refuses the name, for ever.
    Returns the HelmRelease once it says so."""
    from .cluster import Cluster

    if upgrade:
        publish_version(kube, namespace, name, server, "0.1.0")
        body = hooked_release(namespace, name, timeout=timeout,
                              upgrade={"retries": 1, "strategy": "uninstall"})
    else:
        publish_version(kube, namespace, name, server, "0.1.0", ("post-install",))
        body = hooked_release(namespace, name, timeout=timeout, install={"retries": 1})
    body["spec"]["uninstall"]["keepHistory"] = True
    Cluster(kube).apply(body, manager="kustomize-controller")
    if not upgrade:
        return wait_name_in_use(kube, namespace, name, 1, deadline=deadline)
    wait_released(kube, namespace, name, 1, "0.1.0", deadline)
    publish_version(kube, namespace, name, server, "0.2.0", ("post-upgrade",))
    return wait_name_in_use(kube, namespace, name, 2, deadline=deadline)


def legacy_snapshot(kube, namespace: str, name: str) -> dict:
    """Rewrite the HelmRelease's ``status.history`` without ``apiVersion`` — the snapshots
    helm-controller <= v1.4 wrote, as a release untouched since an upgrade of Flux keeps
    them; returns the history written."""
    from kubectl_flux_plunger.kube import MERGE_PATCH, hr_path

    hr = kube.get_hr(namespace, name)
    history = [{k: v for k, v in snap.items() if k != "apiVersion"}
               for snap in hr["status"]["history"]]
    kube.request("PATCH", "PATCH", hr_path(namespace, name) + "/status",
                 content_type=MERGE_PATCH, body={"status": {"history": history}})
    return history
