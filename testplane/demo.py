"""The demo: bring up a real kube-apiserver + etcd and the real Flux helm-controller on
loopback, install a healthy and a stuck HelmRelease, show ``status -A``, run
``recover -A``, and watch helm-controller bring the stuck one back to Ready.

    python -m testplane.demo [--keep]

``--keep`` leaves everything running (prints the KUBECONFIG) until Ctrl-C.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cluster import Cluster
from .helmctl import (ChartServer, HelmController, break_release, build_chart, helmrelease,
                      is_ready, publish_chart, ready, request_reconcile)
from .plane import ControlPlane, wait_for


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def plugin(kubeconfig: Path, *args: str) -> int:
    """Run the plugin the way a user does: through kubectl's plugin dispatch."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    print(f"$ kubectl flux-plunger {' '.join(args)}", flush=True)
    return subprocess.run(["kubectl", "flux-plunger", *args], env=env).returncode


def condition(cluster: Cluster, ns: str, name: str) -> str:
    r = ready(cluster.get(ns, name))
    return f"Ready={r[0]} {r[1]}: {r[2]}" if r else "no Ready condition yet"


def main(argv: list[str]) -> int:
    keep = "--keep" in argv
    work = Path(tempfile.mkdtemp(prefix="flux-plunger-demo-"))
    say("starting kube-apiserver + etcd (built from Go modules) on loopback")
    plane = ControlPlane(work / "plane").start()
    print(f"control plane ready at {plane.server} in {plane.start_seconds:.1f}s")
    charts = ChartServer(work / "charts")
    chart = build_chart(work / "charts")
    charts.start()
    say("starting the real Flux helm-controller out of cluster")
    hc = HelmController(plane.kubeconfig, work).start()
    print(f"helm-controller {hc.version} running (log: {hc.process.log})")
    kube = plane.kube()
    cluster = Cluster(kube)
    try:
        ns = "demo"
        kube.request("CREATE", "POST", "/api/v1/namespaces", content_type="application/json",
                     body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name in ("healthy", "stuck"):
            publish_chart(kube, ns, name, chart, charts)
            cluster.apply(helmrelease(ns, name, name), manager="kustomize-controller")
        say("helm-controller installs both releases")
        for name in ("healthy", "stuck"):
            wait_for(lambda n=name: is_ready(cluster.get(ns, n)), 120,
                     f"{ns}/{name} Ready")
            print(f"{ns}/{name}: {condition(cluster, ns, name)}")

        say("breaking 'stuck': its newest Helm revision is left 'uninstalling' "
            "(what an interrupted helm uninstall leaves)")
        secret = break_release(kube, ns, "stuck")
        request_reconcile(kube, ns, "stuck")
        wait_for(lambda: "has no deployed releases" in condition(cluster, ns, "stuck"), 60,
                 "the release to get stuck")
        print(f"rewrote {secret}; {ns}/stuck: {condition(cluster, ns, 'stuck')}")

        say("flux-plunger sees it")
        plugin(plane.kubeconfig, "status", "-A")
        say("recover it (the same decision table the controller runs)")
        rc = plugin(plane.kubeconfig, "recover", "-A")
        if rc != 0:
            print(f"recover exited {rc}", file=sys.stderr)
            return rc
        say("helm-controller reconciles it again")
        started = time.monotonic()
        wait_for(lambda: is_ready(cluster.get(ns, "stuck")), 120,
                 "the recovered release to become Ready")
        print(f"{ns}/stuck: {condition(cluster, ns, 'stuck')} "
              f"(after {time.monotonic() - started:.1f}s)")
        print("storage:", ", ".join(
            f"{s['metadata']['name']} ({s['metadata']['labels']['status']})"
            for s in kube.list_secrets(ns, "owner=helm,name=stuck")))
        plugin(plane.kubeconfig, "status", "-A", "-o", "wide")
        say("done: the stuck release is Ready again, nothing left suspended or fenced")
        if keep:
            print(f"export KUBECONFIG={plane.kubeconfig}   # Ctrl-C to stop everything")
            signal.pause()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        kube.close()
        hc.stop()
        charts.stop()
        plane.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
