"""Benchmark: what finding every running flux-plunger in the cluster costs (issue 36), on a
real kube-apiserver holding many other controllers' Leases.

    .venv/bin/python bench/lease_survey_bench.py [--others 100,1000,5000] [--nodes 1000]
                                                 [--ours 5] [--rounds 30]

The cluster gets ``--nodes`` node heartbeats in ``kube-node-lease`` (one per node, as the
kubelets keep them), ``--ours`` flux-plunger Leases in namespaces of their own (as serve
writes them: the scope annotations, and a label for the label-selected variant), and, step
by step, ``--others`` leader-election Leases of other controllers spread over 50 namespaces.
For each step it times, ``--rounds`` times each, one after the other:

* ``cluster (survey)``: what ``controller_lease.survey`` sends — one LIST of every Lease but
  the node heartbeats (``fieldSelector=metadata.namespace!=kube-node-lease``), filtered here
  by name and annotations (``_ours``) — end to end, the filtering included;
* ``cluster, 500 a page``: the same LIST paged (``limit=500``), every page;
* ``cluster, nodes too``: the same LIST without the field selector;
* ``label + name``: the alternative — a label-selected LIST across the cluster plus a
  name-selected one (``metadata.name=flux-plunger.cozystack.io``, the reference
  controller's unlabelled Lease): two requests;
* ``one namespace``: the survey before issue 36 (one LIST of the lease namespace).

Prints, per step and variant, the requests (every page of a paged LIST), the median and p95
wall time in ms and the size of the answers (JSON bytes, every page).  A benchmark: it asserts nothing about the numbers (it checks
only that the survey found exactly the flux-plunger Leases it wrote).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.kube import controller_lease  # noqa: E402
from kubectl_flux_plunger.kube import JSON, Kube, KubeError, lease_path  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402

LABEL = "flux-plunger.cozystack.io/controller"


def lease(ns: str, name: str, *, ours: bool = False) -> dict:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    md: dict = {"name": name, "namespace": ns}
    if ours:
        md["annotations"] = {C.LEASE_SELECTOR_ANNOTATION: "", C.LEASE_NAMESPACE_ANNOTATION: ""}
        md["labels"] = {LABEL: "true"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md,
            "spec": {"holderIdentity": f"{name}-7d9f8b6c5-x2x4k_0b6c1c3e-8f5e-4f7a-9a8b",
                     "leaseDurationSeconds": 3600 if ours else 15, "acquireTime": now, "renewTime": now,
                     "leaseTransitions": 3}}


def create(kube: Kube, bodies: list[dict]) -> None:
    def one(body: dict) -> None:
        kube.request("CREATE", "POST", lease_path(body["metadata"]["namespace"]), body=body,
                     content_type=JSON)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, bodies))


def namespaces(kube: Kube, names: list[str]) -> None:
    for n in names:
        try:
            kube.request("CREATE", "POST", "/api/v1/namespaces", content_type=JSON,
                         body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})
        except KubeError as exc:
            if not exc.conflict:       # kube-node-lease is the apiserver's own
                raise


def timed(fn, rounds: int) -> list[float]:
    out = []
    fn()                                   # warm: connection, watch cache
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def size(kube: Kube, *queries: tuple[str | None, dict]) -> tuple[int, int]:
    """(requests, JSON bytes) of the answers, every page of a paged LIST (untimed)."""
    requests = total = 0
    for ns, q in queries:
        cont = None
        while True:
            page = kube.request("LIST", "GET", lease_path(ns), query={**q, "continue": cont})
            requests, total = requests + 1, total + len(json.dumps(page))
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                break
    return requests, total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--others", default="100,1000,5000")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--ours", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    steps = [int(x) for x in args.others.split(",")]
    plane = ControlPlane()
    plane.start()
    kube = plane.kube()
    try:
        spaces = [f"team-{i:02d}" for i in range(50)]
        ours = [f"fp-{i}" for i in range(args.ours)]
        namespaces(kube, ["kube-node-lease", "flux-plunger", *spaces, *ours])
        create(kube, [lease("kube-node-lease", f"node-{i:05d}") for i in range(args.nodes)])
        create(kube, [lease(ns, f"{ns}.flux-plunger.cozystack.io", ours=True) for ns in ours])
        create(kube, [lease(ours[0], C.LEASE_NAME, ours=True)])
        made = 0
        print(f"{args.nodes} node heartbeats, {args.ours + 1} flux-plunger Leases; "
              f"{args.rounds} rounds each; ms: median / p95")
        print(f"{'other Leases':>12}  {'variant':<20} {'requests':>8} {'median':>8} "
              f"{'p95':>8} {'bytes':>10}")
        not_nodes = {"fieldSelector": "metadata.namespace!=kube-node-lease"}
        paged = {**not_nodes, "limit": 500}
        by_label = {"labelSelector": LABEL}
        by_name = {"fieldSelector": f"metadata.name={C.LEASE_NAME}"}
        for step in steps:
            create(kube, [lease(spaces[i % len(spaces)], f"controller-{i:05d}-leader")
                          for i in range(made, step)])
            made = step
            variants = {
                "cluster (survey)": (lambda: controller_lease.survey(kube, "flux-plunger"),
                                     [(None, not_nodes)]),
                "cluster, 500 a page": (lambda: list(kube.reads.pages(lease_path(None), paged)),
                                        [(None, paged)]),
                "cluster, nodes too": (lambda: kube.request("LIST", "GET", lease_path(None)),
                                       [(None, {})]),
                "label + name": (lambda: (kube.request("LIST", "GET", lease_path(None),
                                                       query=by_label),
                                          kube.request("LIST", "GET", lease_path(None),
                                                       query=by_name)),
                                 [(None, by_label), (None, by_name)]),
                "one namespace": (lambda: kube.request("LIST", "GET",
                                                       lease_path("flux-plunger")),
                                  [("flux-plunger", {})]),
            }
            found = controller_lease.survey(kube, "flux-plunger")
            assert len(found.live()) == args.ours + 1, found    # every one of ours, no other
            for name, (fn, queries) in variants.items():
                ms = timed(fn, args.rounds)
                p95 = statistics.quantiles(ms, n=20)[-1]
                requests, answered = size(kube, *queries)
                print(f"{step:>12}  {name:<20} {requests:>8} {statistics.median(ms):>8.1f} "
                      f"{p95:>8.1f} {answered:>10}", flush=True)
    finally:
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
