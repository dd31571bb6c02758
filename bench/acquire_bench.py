"""Benchmark: the acquire against the REAL helm-controller — how often its first apply
answers 409, and how many requests one ``recover -n NS NAME`` (or, with ``--serve``, a
running ``serve`` process) sends end to end.

Everything is counted from the apiserver's audit log (requests whose user agent is
``kubectl-flux-plunger``), not from the client's own counters.

    .venv/bin/python bench/acquire_bench.py [--recoveries 10] [--idle 0] [--serve]

Each round: helm-controller installs a release, its newest revision is broken to
``uninstalling`` (an interrupted ``helm uninstall``), a reconcile is requested and the bench
waits until helm-controller reports "has no deployed releases"; then it waits ``--idle``
seconds and runs the real CLI.  helm-controller runs with the e2e tier's flags
(``--max-retry-delay=3s``: it retries the stuck release every few seconds, so its status
writes race our acquire as in a busy cluster).  Prints per-round lines and the totals.
With ``--face state-error`` the release is stuck the way helm-controller's own install
remediation leaves it (issue 47: revision 1 ``uninstalling`` in its history, Ready=False
StateError), then its chart is fixed; with ``--face name-in-use`` the same remediation keeps
the history (issue 56: revision 1 ``uninstalled``, Helm's install "cannot reuse a name"), then
its chart is fixed.  Without ``--serve`` each round also times stuck →
Ready: from starting the recovery until helm-controller reports Ready=True again.
Run it against another tree with ``--tree PATH`` (e.g. a checkout of an older commit) to
compare before/after in one run.  With ``--serve`` one ``serve`` process (all namespaces, no
leader election) runs throughout; each round breaks a healthy release, serve recovers it on
its own, and the bench waits until helm-controller has installed it again and serve has sent
nothing about it for 2 s, then counts every request serve sent about the release (the
release by name, its storage Secrets and Events in its namespace).  This is a benchmark: it
asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "--tree" in sys.argv:   # another tree's code (and its testplane) for --in-process too
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()))

from testplane.cluster import Cluster, eventually  # noqa: E402
from testplane.helmctl import (ChartServer, HelmController, break_release,  # noqa: E402
                               build_chart, helmrelease, is_ready, publish_chart, ready,
                               request_reconcile)
from testplane.helmctl import (FIXED_VERSION, publish_version,  # noqa: E402
                               stuck_install_remediation, stuck_keep_history, wait_name_in_use)
from testplane.plane import ControlPlane  # noqa: E402

UA = "kubectl-flux-plunger"


def stuck_release(cluster: Cluster, server: ChartServer, chart: Path, ns: str,
                  face: str = "no-deployed-releases") -> None:
    if face == "state-error":
        # issue 47: helm-controller's install remediation runs an uninstall whose pre-delete
        # hook times out; its history records revision 1 uninstalling (Ready=False
        # StateError).  The chart is then fixed, so the recovery's install succeeds
        stuck_install_remediation(cluster.kube, ns, "demo", server)
        publish_version(cluster.kube, ns, "demo", server, FIXED_VERSION)
        return
    if face == "name-in-use":
        # issue 56: the install remediation's uninstall keeps the history (revision 1
        # uninstalled) and Helm's install refuses the name; the chart is then fixed
        stuck_keep_history(cluster.kube, ns, "demo", server)
        publish_version(cluster.kube, ns, "demo", server, FIXED_VERSION)
        wait_name_in_use(cluster.kube, ns, "demo", 1, chart=f"demo@{FIXED_VERSION}")
        return
    publish_chart(cluster.kube, ns, "demo", chart, server)
    cluster.apply(helmrelease(ns, "demo", "demo"), manager="kustomize-controller")
    eventually(lambda: is_ready(cluster.get(ns, "demo")), 120, "installed")
    break_release(cluster.kube, ns, "demo")
    request_reconcile(cluster.kube, ns, "demo")

    def stuck() -> bool:
        r = ready(cluster.get(ns, "demo"))
        return bool(r) and r[0] == "False" and "has no deployed releases" in r[2]
    eventually(stuck, 120, "stuck")


def healthy_again(hr: dict | None) -> bool:
    """Ready=True, at the generation helm-controller last observed."""
    return bool(is_ready(hr) and hr
                and hr["status"].get("observedGeneration") == hr["metadata"]["generation"])


def recover(plane: ControlPlane, ns: str, tree: Path) -> tuple[int, str]:
    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig), PYTHONPATH=str(tree))
    cli = (tree / "kubectl_flux_plunger" / "cli" / "__init__.py").read_text()
    lease = ["--lease-namespace", ns] if "--lease-namespace" in cli else []   # older trees
    proc = subprocess.run([sys.executable, "-m", "kubectl_flux_plunger", "recover", "-n", ns,
                           "demo", *lease],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tree)
    return proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[0]


def settled_events(plane: ControlPlane, mark: int) -> list[dict]:
    """The audit events since ``mark`` once their number stopped changing: a WATCH is
    logged when the apiserver notices its end, which can trail the client's close."""
    events, stable_since = plane.audit_events(since=mark, user_agent=UA), time.monotonic()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and time.monotonic() - stable_since < 1.0:
        time.sleep(0.1)
        again = plane.audit_events(since=mark, user_agent=UA)
        if len(again) != len(events):
            events, stable_since = again, time.monotonic()
    return events


def recover_in_process(plane: ControlPlane, ns: str) -> tuple[int, str]:
    """The executor itself, right after the stuck condition was seen (no process start-up
    in between: what serve does when the watch delivers the stuck condition)."""
    from kubectl_flux_plunger.report.events import Recorder
    from kubectl_flux_plunger.executor import Executor, Options

    kube = plane.kube(user_agent=f"{UA}/in-process")
    try:
        out = Executor(kube, Recorder(kube), options=Options(handshake_timeout=30)).reconcile(
            ns, "demo")
    finally:
        kube.close()
    return (0 if out.result == "recovered" else 1), f"{out.result}: {out.detail}"


def about(events: list[dict], ns: str) -> list[dict]:
    """The requests about the release ``demo`` in ``ns``, by arrival."""
    return [e for e in sorted(events, key=lambda e: e["requestReceivedTimestamp"])
            if (e.get("objectRef") or {}).get("namespace") == ns
            and ((e.get("objectRef") or {}).get("name") == "demo"
                 or (e.get("objectRef") or {}).get("resource") in ("secrets", "events"))]


def recovered_by_serve(plane: ControlPlane, cluster: Cluster, server: ChartServer,
                       chart: Path, ns: str) -> tuple[int, str, list[dict]]:
    """Break a healthy release and let the running serve recover it; returns (0 when it
    came back Ready, the processed annotation, serve's requests about it)."""
    from kubectl_flux_plunger.core import constants as C

    publish_chart(cluster.kube, ns, "demo", chart, server)
    cluster.apply(helmrelease(ns, "demo", "demo"), manager="kustomize-controller")
    eventually(lambda: is_ready(cluster.get(ns, "demo")), 120, "installed")
    mark = plane.audit_mark()
    break_release(cluster.kube, ns, "demo")
    request_reconcile(cluster.kube, ns, "demo")

    def back() -> bool:
        hr = cluster.get(ns, "demo")
        return bool(is_ready(hr)
                    and hr["status"].get("observedGeneration") == hr["metadata"]["generation"]
                    and (hr["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION))
    eventually(back, 120, "recovered by serve and installed again")
    events, stable_since = about(plane.audit_events(since=mark, user_agent=UA), ns), \
        time.monotonic()
    while time.monotonic() - stable_since < 2.0:   # quiet: serve sent nothing more for 2 s
        time.sleep(0.2)
        again = about(plane.audit_events(since=mark, user_agent=UA), ns)
        if len(again) != len(events):
            events, stable_since = again, time.monotonic()
    annotation = cluster.get(ns, "demo")["metadata"]["annotations"][C.PROCESSED_ANNOTATION]
    ack = handshake(about(plane.audit_events(since=mark), ns))
    words = "" if ack is None else (f"; helm-controller acknowledged {ack[0] * 1000:.1f} ms "
                                    f"after the acquire, serve's record {ack[1] * 1000:.1f} ms "
                                    "after that")
    return 0, f"recovered revision {annotation}{words}", events


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def handshake(events: list[dict]) -> tuple[float, float] | None:
    """From every client's requests about the release (by arrival): (helm-controller's
    acknowledgement — its last status write before serve's record — after serve's acquire
    completed; serve's record after that write completed), in seconds; None when the round
    does not show both."""
    ours = [e for e in events if e.get("userAgent", "").startswith(UA) and e["verb"] == "patch"
            and (e.get("objectRef") or {}).get("resource") == "helmreleases"
            and not (e.get("objectRef") or {}).get("subresource")
            and (e.get("responseStatus") or {}).get("code") == 200]
    if len(ours) < 2:
        return None
    acquire, record = ours[0], ours[1]
    acks = [e for e in events if e.get("userAgent", "").startswith("helm-controller")
            and (e.get("objectRef") or {}).get("subresource") == "status"
            and acquire["requestReceivedTimestamp"] < e["requestReceivedTimestamp"]
            < record["requestReceivedTimestamp"]]
    if not acks:
        return None
    ack = acks[-1]
    return (_at(ack["requestReceivedTimestamp"]) - _at(acquire["stageTimestamp"]),
            _at(record["requestReceivedTimestamp"]) - _at(ack["stageTimestamp"]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recoveries", type=int, default=10)
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds between 'stuck' and running recover")
    ap.add_argument("--in-process", action="store_true",
                    help="run this tree's executor in-process instead of the CLI")
    ap.add_argument("--serve", action="store_true",
                    help="count what a running serve process sends per recovery")
    ap.add_argument("--face", choices=("no-deployed-releases", "state-error", "name-in-use"),
                    default="no-deployed-releases",
                    help="how the release is stuck: an interrupted uninstall (\"has no deployed "
                         "releases\") or helm-controller's failed remediation (StateError); "
                         "not with --serve")
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="source tree whose kubectl_flux_plunger runs (default: this one)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="acquire-bench-"))
    plane = ControlPlane(work / "plane").start()
    server = ChartServer(work).start()
    chart = build_chart(work)
    hc = HelmController(plane.kubeconfig, work).start()
    kube = plane.kube(user_agent="bench")
    cluster = Cluster(kube)
    totals: Counter = Counter()
    ready_after: list[float] = []
    first_409 = 0
    serve = None
    if args.serve:   # one serve for the whole bench, from --tree
        from serve_bench import Serve   # bench/ is this script's directory

        serve = Serve(plane, work / "serve.log", "--no-leader-elect",
                      "--handshake-timeout=30s", tree=args.tree.resolve())
        eventually(serve.ready, 60, "serve ready")
    try:
        for i in range(args.recoveries):
            ns = cluster.namespace("acq")
            if serve is not None:
                code, line, events = recovered_by_serve(plane, cluster, server, chart, ns)
            else:
                stuck_release(cluster, server, chart, ns, args.face)
                time.sleep(args.idle)
                mark = plane.audit_mark()
                started = time.monotonic()
                code, line = (recover_in_process(plane, ns) if args.in_process
                              else recover(plane, ns, args.tree))
                events = settled_events(plane, mark)
                # stuck → Ready: from starting the recovery until helm-controller reports
                # the release Ready=True at a generation it observed (its install or upgrade
                # after the recovery)
                eventually(lambda: healthy_again(cluster.get(ns, "demo")), 180, "Ready again")
                ready_after.append(time.monotonic() - started)
            applies = [e for e in events if e["verb"] == "patch"
                       and (e.get("objectRef") or {}).get("resource") == "helmreleases"]
            conflicts = sum((e.get("responseStatus") or {}).get("code") == 409 for e in applies)
            first = bool(applies) and (applies[0].get("responseStatus") or {}).get("code") == 409
            first_409 += first
            counts = Counter(f"{e['verb']} {(e.get('objectRef') or {}).get('resource', '-')}"
                             for e in events)
            totals.update(counts)
            totals["recoveries"] += code == 0
            print(f"round {i + 1}: exit {code}, {len(events)} requests, first acquire "
                  f"{'409' if first else 'ok'}, {conflicts} x 409; {line}", flush=True)
    finally:
        if serve is not None:
            serve.stop()
        hc.stop()
        server.stop()
        plane.stop()
    n = args.recoveries
    requests = sum(v for k, v in totals.items() if k != "recoveries")
    print(f"\nfirst acquire answered 409 in {first_409} of {n} recoveries "
          f"({100.0 * first_409 / n:.0f}%)")
    print(f"requests per recovery (end to end, audit log): {requests / n:.1f}")
    for key in sorted(k for k in totals if k != "recoveries"):
        print(f"  {key}: {totals[key] / n:.2f}")
    if ready_after:
        ordered = sorted(ready_after)
        print(f"stuck -> Ready (recovery started -> Ready=True), {args.face}: median "
              f"{statistics.median(ordered):.1f} s, min {ordered[0]:.1f} s, max {ordered[-1]:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
