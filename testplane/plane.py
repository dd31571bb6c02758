"""A real kube-apiserver + etcd on loopback, like controller-runtime's envtest.

``ControlPlane.start()`` writes a PKI, starts etcd and kube-apiserver on random free
ports, waits for ``/readyz`` and the ``default`` namespace, installs the Flux CRDs and
writes an admin kubeconfig.  ``restart_apiserver()`` supports fault tests; ``stop()``
ends both processes.  Logs are kept in the work directory and shown on failure.

With ``FLUX_PLUNGER_TEST_KUBECONFIG`` set, ``existing()`` wraps that cluster instead
(CRDs are installed if missing; nothing is started or stopped).  With
``FLUX_PLUNGER_TEST_PLANE_DIR`` set, ``shared()`` joins a plane another process started in
that work directory (its ``plane.json``): the audit log can be read, nothing is stopped or
restarted (hack/mutation.py starts one plane for every mutant's pytest session).
"""
from __future__ import annotations

import base64
import functools
import json
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from . import binaries, certs


class PlaneError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - reported at the deadline
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f" (last error: {last_exc})" if last_exc else ""))


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Process:
    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True)
        fh.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise PlaneError(f"{self.name} exited with {self.proc.returncode}; "
                             f"last log lines:\n{_tail(self.log)}")


class ControlPlane:
    def __init__(self, workdir: Path | None = None, *, apiserver_args: tuple[str, ...] = ()):
        """``apiserver_args``: more kube-apiserver flags (e.g. ``--feature-gates=...``)."""
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="flux-plunger-plane-"))
        self.extra_apiserver_args = list(apiserver_args)
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.port = 0
        self.files: dict[str, Path] = {}
        self.owned = True
        self.shared_from = False  # joined through plane.json: the audit log is readable
        self.start_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    def existing(cls, kubeconfig: str) -> "ControlPlane":
        plane = cls()
        plane.owned = False
        plane.kubeconfig = Path(kubeconfig)
        plane.install_crds()
        return plane

    @classmethod
    def shared(cls, workdir: str | Path) -> "ControlPlane":
        """The plane another process started in ``workdir`` (see ``start``'s plane.json)."""
        plane = cls(Path(workdir))
        try:
            state = json.loads((plane.workdir / "plane.json").read_text())
        except (OSError, ValueError) as exc:
            raise PlaneError(f"no running control plane in {workdir}: {exc}") from None
        plane.port = int(state["port"])
        plane.files = {k: Path(v) for k, v in state["files"].items()}
        plane.owned = False
        plane.shared_from = True
        return plane

    def start(self, *, crds: bool = True) -> "ControlPlane":
        """``crds=False`` leaves the Flux CRDs out (a cluster without Flux)."""
        started = time.monotonic()
        etcd_bin = binaries.ensure("etcd")
        api_bin = binaries.ensure("kube-apiserver")
        crd_dir = binaries.crd_dir() if crds else None
        self.files = certs.write_pki(self.workdir / "pki")
        self._start_etcd(etcd_bin)
        self.port = free_port()
        self._api_argv = self._apiserver_args(api_bin)
        self._start_apiserver()
        self._write_admin_kubeconfig()
        if crds:
            self.install_crds(crd_dir)
        (self.workdir / "plane.json").write_text(json.dumps(
            {"port": self.port, "files": {k: str(v) for k, v in self.files.items()}}))
        self.start_seconds = time.monotonic() - started
        return self

    def _start_etcd(self, etcd_bin: Path) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.workdir / "etcd-data"
        data.mkdir(exist_ok=True)
        self.etcd = Process("etcd", [
            str(etcd_bin), f"--data-dir={data}", f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ], self.workdir / "etcd.log")
        self.etcd.start()

        def healthy():
            self.etcd.check()
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as r:
                return r.status == 200
        wait_for(healthy, 60, "etcd /health")

    def _apiserver_args(self, api_bin: Path) -> list[str]:
        f = self.files
        return [
            str(api_bin), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={f['tls_cert']}", f"--tls-private-key-file={f['tls_key']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--client-ca-file={f['client_ca']}",
            f"--service-account-issuer=https://127.0.0.1:{self.port}/",
            f"--service-account-key-file={f['sa_pub']}",
            f"--service-account-signing-key-file={f['sa_key']}",
            "--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--event-ttl=1h", "--v=1",
            f"--audit-policy-file={self._audit_policy()}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0",
            *self.extra_apiserver_args,
        ]

    # -- audit log (what a process really sent, counted from outside it) ----------

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _audit_policy(self) -> Path:
        """One Metadata-level event per request, written when the response completes."""
        path = self.workdir / "audit-policy.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [{"level": "Metadata"}]}))
        return path

    def audit_mark(self) -> int:
        """A position in the audit log; ``audit_events(since=mark)`` reads what came after."""
        try:
            return self.audit_log.stat().st_size
        except FileNotFoundError:
            return 0

    def audit_events(self, since: int = 0, *, user_agent: str | None = None,
                     user: str | None = None) -> list[dict]:
        """Audit events written after ``since``, optionally only those whose user agent
        starts with ``user_agent`` or whose user is ``user``.  Raises when this plane is an
        existing cluster (its audit log is not ours to read)."""
        if not (self.owned or self.shared_from):
            raise PlaneError("the audit log is only available on a control plane started here")
        try:
            with open(self.audit_log, "rb") as fh:
                fh.seek(since)
                raw = fh.read()
        except FileNotFoundError:
            return []
        out = []
        # the apiserver may be mid-way through writing the last line: complete lines only
        raw = raw[:raw.rfind(b"\n") + 1]
        for line in raw.splitlines():
            if not line.strip():
                continue
            ev = json.loads(line)
            if user_agent and not (ev.get("userAgent") or "").startswith(user_agent):
                continue
            if user and (ev.get("user") or {}).get("username") != user:
                continue
            out.append(ev)
        return out

    def _start_apiserver(self) -> None:
        self.apiserver = Process("kube-apiserver", self._api_argv, self.workdir / "kube-apiserver.log")
        self.apiserver.start()
        ctx = self.ssl_context()

        def ready():
            self.apiserver.check()
            req = urllib.request.Request(f"https://127.0.0.1:{self.port}/readyz")
            with urllib.request.urlopen(req, context=ctx, timeout=3) as r:
                return r.status == 200
        try:
            wait_for(ready, 120, "kube-apiserver /readyz", interval=0.25)
            wait_for(lambda: self._get("/api/v1/namespaces/default"), 30, "namespace default",
                     interval=0.1)
        except TimeoutError as exc:
            raise PlaneError(f"{exc}; last apiserver log lines:\n{_tail(self.apiserver.log)}") from None

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.files["serving_ca"]))
        ctx.load_cert_chain(str(self.files["admin_cert"]), str(self.files["admin_key"]))
        return ctx

    def _get(self, path: str) -> dict:
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}")
        with urllib.request.urlopen(req, context=self.ssl_context(), timeout=5) as r:
            return json.loads(r.read())

    @functools.cached_property
    def watch_lists(self) -> bool:
        """Whether this apiserver serves watch-lists (``sendInitialEvents``; the WatchList
        feature, on by default from Kubernetes 1.34): asked of the server itself, once —
        one short watch-list of the ``default`` namespace, 200 or refused (400/422).  The
        tests that assert exact request sequences assert the one for this answer."""
        from kubectl_flux_plunger.kube import KubeError

        k = self.kube(user_agent="testplane-probe")
        try:
            resp = k.open_watch("/api/v1/namespaces", {
                "watch": "true", "fieldSelector": "metadata.name=default",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true",
                "timeoutSeconds": "1"})
            resp.close()
            return True
        except KubeError as exc:
            if exc.status in (400, 422):
                return False
            raise
        finally:
            k.close()

    def stop_apiserver(self) -> None:
        if self.apiserver:
            self.apiserver.stop()

    def restart_apiserver(self, *, move_revision: bool = False) -> None:
        """Stop and start kube-apiserver on the same port, etcd and PKI (fault tests).

        ``move_revision``: while no apiserver runs, write one key outside ``/registry``
        straight to etcd (its JSON gateway), so the restarted apiserver's watch caches start
        at a revision newer than any resourceVersion a client saw before the restart: a
        watch resumed from one is certain to get 410.  Without it a restart with no write in
        between lets the old watch resume."""
        self.stop_apiserver()
        if move_revision:
            body = json.dumps({
                "key": base64.b64encode(b"flux-plunger-testplane/revision").decode(),
                "value": base64.b64encode(str(time.time()).encode()).decode(),
            }).encode()
            req = urllib.request.Request(self.etcd_url + "/v3/kv/put", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as r:
                json.load(r)
        self._start_apiserver()

    def stop(self) -> None:
        if not self.owned:
            return
        for p in (self.apiserver, self.etcd):
            if p:
                p.stop()

    def logs(self) -> str:
        out = []
        for p in (self.etcd, self.apiserver):
            if p:
                out.append(f"--- {p.name} ({p.log}) ---\n{_tail(p.log)}")
        return "\n".join(out)

    # -- clients -----------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _write_admin_kubeconfig(self) -> None:
        f = self.files
        self.write_kubeconfig(self.kubeconfig, "admin", {
            "client-certificate": str(f["admin_cert"]), "client-key": str(f["admin_key"])})

    def write_kubeconfig(self, path: Path, user: str, credentials: dict,
                         namespace: str = "default") -> Path:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server, "certificate-authority": str(self.files["serving_ca"])}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user,
                                                       "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    def self_contained_kubeconfig(self, credentials: dict | None = None,
                                  user: str = "admin") -> bytes:
        """A kubeconfig with every certificate and key embedded (no file paths), as a
        ``spec.kubeConfig`` Secret must hold; ``credentials`` default to the admin client
        certificate, e.g. ``{"token": ...}`` for a ServiceAccount."""
        import base64

        def data(path: Path) -> str:
            return base64.b64encode(Path(path).read_bytes()).decode()
        f = self.files
        creds = credentials if credentials is not None else {
            "client-certificate-data": data(f["admin_cert"]),
            "client-key-data": data(f["admin_key"])}
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "remote",
            "clusters": [{"name": "remote", "cluster": {
                "server": self.server, "certificate-authority-data": data(f["serving_ca"])}}],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": user}}],
        }
        return yaml.safe_dump(cfg).encode()

    def kube(self, **kwargs):
        from kubectl_flux_plunger.kube import Kube
        return Kube.from_kubeconfig(str(self.kubeconfig), **kwargs)

    # -- CRDs --------------------------------------------------------------------

    def install_crds(self, crd_dir: Path | None = None) -> None:
        from kubectl_flux_plunger.kube import APPLY_PATCH, KubeError
        crd_dir = crd_dir or binaries.crd_dir()
        kube = self.kube()
        names = []
        for path in sorted(crd_dir.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                name = doc["metadata"]["name"]
                names.append(name)
                kube.request("APPLY", "PATCH",
                             f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                             body=doc, content_type=APPLY_PATCH,
                             query={"fieldManager": "testplane", "force": "true"})

        def established():
            for name in names:
                crd = kube.request("GET", "GET",
                                   f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
                if conds.get("Established") != "True":
                    return False
            try:
                kube.request("GET", "GET", "/apis/helm.toolkit.fluxcd.io/v2/helmreleases")
            except KubeError:
                return False
            return True
        wait_for(established, 60, "Flux CRDs Established")
        kube.close()


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached ``main``: stop the control plane, then exit."""


def _stop_on_signal(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise _Stopped(signum)


def main() -> int:
    """``python -m testplane.plane``: start a control plane and keep it until Ctrl-C,
    SIGTERM or SIGHUP (a closed terminal), then stop its kube-apiserver and etcd.  They run
    in sessions of their own, so no signal reaches them but the one ``stop()`` sends; a
    signal landing while the plane starts stops what was started so far.  SIGINT has its
    handler too, like the others, rather than Python's KeyboardInterrupt: a plane started
    from a background job (``cmd &``) inherits SIGINT ignored, which Python would keep."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    plane = ControlPlane()
    try:
        plane.start()
        print(f"kube-apiserver ready at {plane.server} in {plane.start_seconds:.1f}s", flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        while True:
            signal.pause()
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)   # a second signal must not cut the stop short
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
