"""Benchmark: what one full read of every HelmRelease costs the apiserver (issue #23's floor).

    .venv/bin/python bench/read_floor_bench.py --plane-dir DIR [--releases 10000] [--rounds 3]

serve's time to its last-page recovery and to ready is bounded below by how fast the
apiserver can hand over every release at all.  This reads them with a client that does
next to nothing — bytes counted, the end found by a substring search, nothing decoded — so
what is left is the apiserver: per variant, the time to the first byte and to the end (the
``k8s.io/initial-events-end`` bookmark of a watch-list, the end of a LIST's body or of its
last page), the bytes, and the CPU kube-apiserver and etcd used meanwhile (``/proc``).

Variants (alternating round by round, on one plane):

* ``watch-list json``: what serve reads (``sendInitialEvents=true``, full objects);
* ``LIST json, unpaged`` and ``LIST json, 100 a page`` (serve before issue #23) and 500;
* ``watch-list metadata``: ``as=PartialObjectMetadata`` — metadata only, no spec/status;
* ``watch-list table`` (``as=Table``, ``includeObject=None`` and ``=Metadata``): the CRD's
  printer columns (Name, Age, Ready, Status) — no namespace, no Released condition, no
  spec.suspend;
* ``watch-list cbor``: ``application/cbor-seq``; the server's answer is reported (kube-apiserver
  1.37 serves CBOR only behind the alpha CBORServingAndStorage gate).

The plane comes from ``serve_first_bench.py``'s kept directory (``--plane-dir``; releases
seeded there, or here with ``--releases``).  A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from serve_first_bench import seed, start_plane  # noqa: E402

HR = "/apis/helm.toolkit.fluxcd.io/v2/helmreleases"
END = b"k8s.io/initial-events-end"
WATCH_LIST = {"watch": "true", "allowWatchBookmarks": "true", "sendInitialEvents": "true",
              "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "120"}
JSON = "application/json"
META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Reader:
    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.http = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED", ca_certs=str(pki / "serving-ca.crt"),
            cert_file=str(pki / "admin.crt"), key_file=str(pki / "admin.key"), retries=False)

    def _open(self, accept: str, query: dict[str, str]) -> urllib3.BaseHTTPResponse:
        return self.http.request("GET", self.server + HR, fields=query,
                                 headers={"Accept": accept}, preload_content=False,
                                 timeout=urllib3.Timeout(connect=10, read=150))

    def watch_list(self, accept: str, extra: dict[str, str] | None = None) -> dict[str, float]:
        t0 = time.monotonic()
        resp = self._open(accept, {**WATCH_LIST, **(extra or {})})
        first = None
        size, tail = 0, b""
        try:
            if resp.status != 200:
                return {"status": resp.status, "end": float("nan")}
            for chunk in resp.stream(65536):
                if first is None:
                    first = time.monotonic() - t0
                size += len(chunk)
                if END in tail + chunk:
                    break
                tail = chunk[-len(END):]
            end = time.monotonic() - t0
        finally:
            resp.release_conn()
            resp.close()
        return {"status": 200, "first": first or end, "end": end, "bytes": size}

    def list(self, limit: int) -> dict[str, float]:
        t0 = time.monotonic()
        first = None
        size, cont, pages = 0, "", 0
        while True:
            query = {"limit": str(limit)} if limit else {}
            if cont:
                query["continue"] = cont
            resp = self._open(JSON, query)
            body = resp.read()
            resp.release_conn()
            if first is None:
                first = time.monotonic() - t0
            size += len(body)
            pages += 1
            # the continue token is in the list's metadata, at the end of the body (an
            # unstructured list's keys are sorted: apiVersion, items, kind, metadata)
            tail = body[-4096:]
            at = tail.find(b'"continue":"')
            cont = tail[at + 12:tail.index(b'"', at + 12)].decode() if at >= 0 else ""
            if not cont:
                break
        return {"status": 200, "first": first, "end": time.monotonic() - t0, "bytes": size,
                "pages": pages}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plane-dir", type=Path, required=True)
    ap.add_argument("--releases", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    a.plane_dir.mkdir(parents=True, exist_ok=True)
    plane = start_plane(a.plane_dir)
    kube = plane.kube()
    try:
        seed(kube, a.releases, 16)
        api_pid = plane.apiserver.proc.pid
        etcd_pid = plane.etcd.proc.pid
        reader = Reader(f"https://127.0.0.1:{plane.port}", a.plane_dir / "pki")
        variants: list[tuple[str, Callable[[], dict[str, float]]]] = [
            ("watch-list json (serve)", lambda: reader.watch_list(JSON)),
            ("LIST json, unpaged", lambda: reader.list(0)),
            ("LIST json, 100 a page (serve before)", lambda: reader.list(100)),
            ("LIST json, 500 a page", lambda: reader.list(500)),
            ("watch-list metadata only", lambda: reader.watch_list(META)),
            ("watch-list table, includeObject=Metadata",
             lambda: reader.watch_list(TABLE, {"includeObject": "Metadata"})),
            ("watch-list table, includeObject=None",
             lambda: reader.watch_list(TABLE, {"includeObject": "None"})),
            ("watch-list cbor", lambda: reader.watch_list("application/cbor-seq")),
        ]
        reader.list(500)  # warm the watch cache and the connection
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
        for rnd in range(a.rounds):
            for name, run in variants:
                c_api, c_etcd = cpu_seconds(api_pid), cpu_seconds(etcd_pid)
                r = run()
                r["api_cpu"] = cpu_seconds(api_pid) - c_api
                r["etcd_cpu"] = cpu_seconds(etcd_pid) - c_etcd
                results[name].append(r)
            print(f"round {rnd + 1} done; load average {os.getloadavg()[0]:.2f}", flush=True)
        print(f"\none full read of {a.releases + 2} HelmReleases, median of {a.rounds} "
              "(first byte / end / MB / kube-apiserver CPU / etcd CPU):")
        for name, _ in variants:
            rs = results[name]
            if any(r["status"] != 200 for r in rs):
                print(f"  {name}: refused, HTTP {rs[0]['status']}")
                continue

            def med(k: str, rs: list[dict[str, float]] = rs) -> float:
                return statistics.median(r[k] for r in rs)
            ends = ", ".join(f"{r['end']:.2f}" for r in rs)
            print(f"  {name}: first byte {med('first'):.2f}s, end {med('end'):.2f}s ({ends}), "
                  f"{med('bytes') / 1e6:.1f} MB, kube-apiserver CPU {med('api_cpu'):.2f}s, "
                  f"etcd CPU {med('etcd_cpu'):.2f}s")
        print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
