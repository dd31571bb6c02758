"""Sharding (one flux-plunger per helm-controller shard) against the real apiserver, with the
chart rendered by real Helm for every install and each controller on a ServiceAccount bound
to exactly its install's rendered roles (so the audit log tells the installs apart):

1. two shards, each with its own selector and Lease (both in one namespace): both lead, each
   recovers only its own stuck release; the other shard's release is never read, written or
   counted (audit log, metrics, logs);
2. shard b holds a recovery in flight (the acknowledgement held back); the uninstall hook of
   shard a — and of the unsharded main install (`!sharding.fluxcd.io/key`) — runs exactly the
   command the chart renders: shard b's suspension and fence are untouched (the hook releases
   its own install's leftover), and shard b then finishes the recovery;
3. two shards in the same namespace: the chart renders distinct names for everything, the
   renderings apply side by side, and both lead (1);
4. the main install never touches a sharded release (its serve, and its hook in 2);
5. the writing verbs read every flux-plunger Lease (issue 28): the crash clean-up
   (resume-owned), recover and release-fence, run without --lease-name while shard b is
   mid-recovery, leave shard b's release alone (exit 1, naming shard b's controller) and
   act on a leftover outside every live shard's scope; --lease-name never narrows that;
   --force overrides; a killed shard's Lease stops counting once it has expired; the
   reference controller's Lease (no scope recorded) covers everything until it expires;
   status says which controller covers the release;
6. two shards installed with one selector both warn (gauge, log line, Warning Event on
   their Lease) and stop when one goes; disjoint shards and the main instance say nothing.

The same with two chart installs in kind: tests/kind (see the report of issue 18)."""
from __future__ import annotations

import copy
import json
import re

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import ownership
from testplane.cluster import SimulatedHelmController, unique
from testplane.rbac import service_account_kubeconfig

from ..conftest import run_cli
from .conftest import hold, stuck_release
from testplane.cluster import eventually
from .test_deploy_manifests import ServeProcess, apply, find, helm, helm_template, is_hook  # noqa: F401

KEY = "sharding.fluxcd.io/key"


def render(helm, ns: str, release: str, *sets: str) -> list[dict]:  # noqa: F811
    proc = helm_template(helm, ns, *sets, release=release)
    assert proc.returncode == 0, proc.stderr
    import yaml
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def container_args(doc: dict) -> list[str]:
    return doc["spec"]["template"]["spec"]["containers"][0]["args"]


class Install:
    """One chart install, rendered (release ``name``, values ``sets``) in ``ns``: its
    Deployment's serve flags, its hook Job's command, and a serve process on a
    ServiceAccount bound to exactly the rendered ClusterRole and Lease Role."""

    def __init__(self, helm, plane, kube, ns: str, name: str, *sets: str):  # noqa: F811
        self.plane, self.kube, self.ns, self.name = plane, kube, ns, name
        self.docs = render(helm, ns, name, *sets)
        self.fullname = find(self.docs, "ServiceAccount", name)["metadata"]["name"]
        dep = find(self.docs, "Deployment", self.fullname)
        self.serve_args = container_args(dep)
        self.hook_args = container_args(find(self.docs, "Job", f"{self.fullname}-uninstall-cleanup"))
        lease = [a for a in self.serve_args if a.startswith("--leader-election-id=")]
        self.lease = lease[0].split("=", 1)[1] if lease else C.LEASE_NAME
        sel = [a for a in self.serve_args if a.startswith("--selector=")]
        self.selector = sel[0].split("=", 1)[1] if sel else None
        self.proc: ServeProcess | None = None
        self.user = ""

    def start(self, tmp_path, *extra: str) -> ServeProcess:
        sa = unique(self.name)
        cluster_name = f"{self.ns}-{self.fullname}"
        rules = {self.ns: copy.deepcopy(
            find(self.docs, "Role", f"{self.fullname}-leader-election")["rules"])}
        watched = [d for d in self.docs if d["kind"] == "Role"
                   and d["metadata"]["name"] == cluster_name]
        if watched:   # watchNamespace: a Role there, and the cluster-wide LIST of the Leases
            (role,) = watched
            rules.setdefault(role["metadata"]["namespace"], []).extend(
                copy.deepcopy(role["rules"]))
            cluster_name += "-leases"
        kc = service_account_kubeconfig(
            self.plane, sa, namespace=self.ns,
            cluster_rules=copy.deepcopy(find(self.docs, "ClusterRole", cluster_name)["rules"]),
            namespace_rules=rules)
        self.user = f"system:serviceaccount:{self.ns}:{sa}"
        # the install's own scope and Lease, as its Deployment runs serve
        scope = [a for a in self.serve_args
                 if a.startswith(("--selector=", "--leader-election-id=", "--namespace="))]
        self.proc = ServeProcess(kc, tmp_path / f"{self.name}.log", "--leader-elect",
                                 f"--leader-election-namespace={self.ns}", *scope, *extra)
        return self.proc

    def leads(self) -> bool:
        spec = (self.kube.get_lease(self.ns, self.lease) or {}).get("spec") or {}
        return bool(spec.get("holderIdentity")) and self.proc is not None and self.proc.ready()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()


def started(plane, helm, cluster, request):  # noqa: F811
    """A factory ``make(namespace, release, *sets)`` of chart installs, each started by the
    test and stopped (SIGKILL) at its end; their serve logs printed when the test failed."""
    made: list[Install] = []

    def _make(namespace: str, name: str, *sets: str) -> Install:
        i = Install(helm, plane, cluster.kube, namespace, name, *sets)
        made.append(i)
        return i
    yield _make
    for i in made:
        i.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        import sys
        for i in made:
            if i.proc is not None:
                sys.stderr.write(f"\n--- {i.name} serve log ---\n{i.proc.text()}\n")


@pytest.fixture
def installs(plane, helm, cluster, ns, request):  # noqa: F811
    """``installs(release, *sets)``: :func:`started` in the test's namespace."""
    for make in started(plane, helm, cluster, request):
        yield lambda name, *sets: make(ns, name, *sets)


def about(events: list[dict], ns: str, name: str) -> list[str]:
    """Requests in the audit log that name release ``ns/name``: the release itself, its
    Helm storage Secrets (by name or by the LIST's name=<release> label), its Events."""
    out = []
    for e in events:
        ref = e.get("objectRef") or {}
        uri = e.get("requestURI", "")
        if ref.get("namespace") != ns:
            continue
        res, obj = ref.get("resource"), ref.get("name") or ""
        if (res == "helmreleases" and obj == name
                or res == "secrets" and (obj.startswith(f"sh.helm.release.v1.{name}.")
                                         or f"name%3D{name}" in uri or f"name={name}" in uri)
                or res == "events" and obj.startswith(f"{name}.")):
            out.append(f"{e['verb']} {uri}")
    return out


def held_by_us(cluster, ns: str, name: str) -> bool:
    hr = cluster.get(ns, name)
    return (hr is not None and hr["spec"].get("suspend") is True
            and ownership.owns_suspend(hr) and C.FENCE in hr["metadata"]["finalizers"])


def recovered(cluster, ns: str, name: str) -> bool:
    hr = cluster.get(ns, name)
    return (f"sh.helm.release.v1.{name}.v2" not in cluster.secret_names(ns, name)
            and hr is not None and not hr["spec"].get("suspend")
            and C.FENCE not in hr["metadata"]["finalizers"]
            and (hr["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION) == "2")


def untouched(cluster, ns: str, name: str) -> bool:
    """Stuck as created: no suspension, no fence, no annotation, storage intact."""
    hr = cluster.get(ns, name)
    md = hr["metadata"]
    return (not hr["spec"].get("suspend") and C.FENCE not in md["finalizers"]
            and C.PROCESSED_ANNOTATION not in (md.get("annotations") or {})
            and f"sh.helm.release.v1.{name}.v2" in cluster.secret_names(ns, name)
            and not any(e["manager"] == C.FIELD_MANAGER for e in md.get("managedFields") or []))


def log_releases(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("release"):
            out.add(rec["release"])
    return out


# -- 1 + 3: two shards, one namespace, both leading, each on its own releases ----------------

def test_two_shards_in_one_namespace_lead_on_their_own_leases_and_keep_to_their_own_releases(
        plane, cluster, ns, installs, tmp_path):
    a_key, b_key = unique("a"), unique("b")
    a = installs(f"flux-plunger-{a_key}", f'shard="{a_key}"')
    # shard b by an explicit selector in Flux's set form (spaces, parentheses: quoted in
    # the rendered args, through serve's LIST and WATCH)
    b_sel = f"{KEY} in ({b_key}, {b_key}-spare)"
    b = installs(f"flux-plunger-{b_key}", f"selector={json.dumps(b_sel)}")
    # 3: distinct names for everything the two renderings hold, and distinct Leases
    names = [{(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
              for d in i.docs} for i in (a, b)]
    assert names[0] and not names[0] & names[1], names[0] & names[1]
    assert (a.lease, b.lease) == (f"{a.name}.flux-plunger.cozystack.io",
                                  f"{b.name}.flux-plunger.cozystack.io")
    assert (a.selector, b.selector) == (f"{KEY}={a_key}", b_sel)
    assert a.hook_args[:2] == ["release-fence", "--all-namespaces"]
    assert f"--selector={KEY}={a_key}" in a.hook_args
    # the pods each install's hook waits for are its own Deployment's, never the other's
    sel = [find(i.docs, "Deployment", i.fullname)["spec"]["selector"]["matchLabels"]
           for i in (a, b)]
    assert sel[0] != sel[1]
    # the two renderings apply side by side (hooks aside: Helm runs them on uninstall)
    docs = [d for i in (a, b) for d in i.docs if not is_hook(d)]
    out = apply(plane, docs, "test-shards")
    assert out.count("serverside-applied") == len(docs), out
    # 1: both lead, on their own Leases
    mark = plane.audit_mark()
    pa, pb = a.start(tmp_path), b.start(tmp_path)
    pa.wait_for(a.leads, 30, "shard a leads")
    pb.wait_for(b.leads, 30, "shard b leads")
    for i in (a, b):
        got = cluster.kube.get_lease(ns, i.lease)["metadata"]["annotations"]
        assert got[C.LEASE_SELECTOR_ANNOTATION] == i.selector
    assert cluster.kube.get_lease(ns, C.LEASE_NAME) is None  # nobody on the contract's Lease
    with SimulatedHelmController(cluster, ns):
        stuck_release(cluster, ns, "alpha", labels={KEY: a_key})
        stuck_release(cluster, ns, "bravo", labels={KEY: b_key})
        pa.wait_for(lambda: recovered(cluster, ns, "alpha"), 60, "alpha recovered")
        pb.wait_for(lambda: recovered(cluster, ns, "bravo"), 60, "bravo recovered")
        pa.wait_for(lambda: pa.idle() and pb.idle(), 30, "both idle")
    mine = {i.name: plane.audit_events(mark, user=i.user) for i in (a, b)}
    assert about(mine[a.name], ns, "alpha") and about(mine[b.name], ns, "bravo")
    assert about(mine[a.name], ns, "bravo") == []   # never read for a decision nor written
    assert about(mine[b.name], ns, "alpha") == []
    # ... nor counted: one recovery each, and no log line about the other's release
    for proc, install, own, other in ((pa, a, "alpha", "bravo"), (pb, b, "bravo", "alpha")):
        text = proc._get(proc.metrics, "/metrics")[1]
        # every sample names the install by its Lease (what the alert rules group by)
        assert (f'flux_plunger_recoveries_total{{lease="{install.lease}",result="recovered"}}'
                ' 1.0') in text, text
        assert f"{ns}/{own}" in log_releases(proc.text())
        assert f"{ns}/{other}" not in log_releases(proc.text())


# -- 2 + 4: an install's uninstall hook leaves another shard's recovery alone ---------------

@pytest.mark.parametrize("uninstalled", ["shard", "main"])
def test_an_installs_uninstall_hook_leaves_another_shards_recovery_in_flight_alone(
        plane, cluster, ns, installs, tmp_path, uninstalled):
    a_key, b_key = unique("a"), unique("b")
    b = installs(f"flux-plunger-{b_key}", f'shard="{b_key}"')
    if uninstalled == "shard":
        gone = installs(f"flux-plunger-{a_key}", f'shard="{a_key}"')
        own_labels = {KEY: a_key}
    else:  # the unsharded main install, next to the shards
        gone = installs("flux-plunger", f'selector="!{KEY}"')
        own_labels = {}
        assert gone.lease == C.LEASE_NAME  # the contract's Lease stays the main install's
    assert f"--selector={gone.selector}" in gone.hook_args
    pb = b.start(tmp_path, "--handshake-timeout=120s")
    pb.wait_for(b.leads, 30, "shard b leads")
    # shard b acquires and waits for helm-controller's acknowledgement (held back: no
    # helm-controller runs yet)
    stuck_release(cluster, ns, "bravo", labels={KEY: b_key})
    pb.wait_for(lambda: held_by_us(cluster, ns, "bravo"), 30, "shard b holds bravo")
    # what the uninstalled install itself left behind (a crash's hold): its hook releases it
    cluster.create_hr(ns, "own-left", labels=own_labels)
    hold(cluster, ns, "own-left")
    before = cluster.get(ns, "bravo")
    # the hook Job's command exactly as rendered — on this namespace instead of every one
    # (other tests' releases are not this test's to release; bravo is in this namespace,
    # so only the selector keeps the hook off it)
    args = ["--namespace=" + ns if a == "--all-namespaces" else a for a in gone.hook_args]
    assert args != gone.hook_args
    r = run_cli(*args, kubeconfig=plane.kubeconfig)
    assert r.code == 0, r
    assert "released 1 of 1 fenced HelmReleases" in r.out, r
    assert "own-left" in r.out + r.err and "bravo" not in r.out + r.err, r
    assert C.FENCE not in cluster.get(ns, "own-left")["metadata"]["finalizers"]
    # shard b's suspension and fence untouched: not a single write since it took them
    after = cluster.get(ns, "bravo")
    assert held_by_us(cluster, ns, "bravo")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "sh.helm.release.v1.bravo.v2" in cluster.secret_names(ns, "bravo")
    # and shard b finishes the recovery once helm-controller answers
    with SimulatedHelmController(cluster, ns):
        pb.wait_for(lambda: recovered(cluster, ns, "bravo"), 60, "shard b recovered bravo")


def test_the_main_install_never_touches_a_sharded_release(plane, cluster, ns, installs,
                                                          tmp_path):
    key = unique("s")
    main = installs("flux-plunger", f'selector="!{KEY}"')
    assert main.selector == f"!{KEY}" and main.lease == C.LEASE_NAME
    mark = plane.audit_mark()
    pm = main.start(tmp_path, "-n", ns)
    pm.wait_for(main.leads, 30, "the main install leads")
    with SimulatedHelmController(cluster, ns):
        stuck_release(cluster, ns, "sharded", labels={KEY: key})
        stuck_release(cluster, ns, "plain")
        pm.wait_for(lambda: recovered(cluster, ns, "plain"), 60, "the unsharded one recovered")
        # a resync LIST would pick the sharded one up if the selector let it through
        pm.wait_for(pm.idle, 30, "idle")
    assert untouched(cluster, ns, "sharded")
    mine = plane.audit_events(mark, user=main.user)
    assert about(mine, ns, "plain")
    assert about(mine, ns, "sharded") == []


# -- 5: the one-shot verbs and every shard's running controller (issue 28) ---------------

def lease_spec(cluster, ns: str, name: str) -> dict:
    return (cluster.kube.get_lease(ns, name) or {}).get("spec") or {}


def deferred_line(out: str, name: str) -> str:
    (line,) = [ln for ln in out.splitlines()
               if ln.startswith(f"helmrelease.helm.toolkit.fluxcd.io/{name} deferred: ")]
    return line


def test_the_crash_clean_up_and_recover_leave_a_shards_recovery_in_flight_alone(
        plane, cluster, ns, installs, tmp_path):
    """Shard b holds bravo mid-recovery (its handshake waits on a helm-controller that does
    not run), shard a runs too; the documented crash clean-up and a recover run WITHOUT
    --lease-name: bravo is left alone, named with shard b's controller, and the verb exits
    1; a leftover outside every live shard's scope is lifted in the same run."""
    a_key, b_key = unique("a"), unique("b")
    a = installs(f"flux-plunger-{a_key}", f'shard="{a_key}"')
    b = installs(f"flux-plunger-{b_key}", f'shard="{b_key}"')
    pa, pb = a.start(tmp_path), b.start(tmp_path, "--handshake-timeout=120s")
    pa.wait_for(a.leads, 30, "shard a leads")
    pb.wait_for(b.leads, 30, "shard b leads")
    stuck_release(cluster, ns, "bravo", labels={KEY: b_key})
    pb.wait_for(lambda: held_by_us(cluster, ns, "bravo"), 30, "shard b holds bravo")
    cluster.create_hr(ns, "free", labels={KEY: unique("gone")})   # a shard that is no more
    hold(cluster, ns, "free")                                     # ... left this behind
    before = cluster.get(ns, "bravo")["metadata"]["resourceVersion"]
    holder = lease_spec(cluster, ns, b.lease)["holderIdentity"]
    kc = plane.kubeconfig
    mark = plane.audit_mark()
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", ns, kubeconfig=kc)
    assert r.code == 1, r
    line = deferred_line(r.out, "bravo")
    assert f"flux-plunger controller {holder} holds Lease {ns}/{b.lease} (running" in line, r
    assert f"(watching -l '{KEY}={b_key}')" in line and "--force" in line, r
    assert "free relinquished" in r.out, r
    assert "lifted 1 flux-plunger suspensions, 0 failed" in r.out, r
    free = cluster.get(ns, "free")
    assert not free["spec"].get("suspend") and C.FENCE not in free["metadata"]["finalizers"]
    # one LIST of the Leases (the cluster's, issue 36), no GET of any (the request counts
    # keep their values): what reached the cluster's or this namespace's Leases since the
    # mark, the serve processes' renewals aside (the apiserver's own are in kube-system)
    leases = [e["verb"] for e in plane.audit_events(mark)
              if (e.get("objectRef") or {}).get("resource") == "leases"
              and (e.get("objectRef") or {}).get("namespace") in (ns, None)
              and not (e.get("user") or {}).get("username", "").startswith(
                  "system:serviceaccount:")]
    assert leases == ["list"], leases
    for args in (("recover", "-n", ns, "bravo"), ("resume-owned", "-n", ns, "bravo"),
                 ("recover", "-n", ns, "-l", f"{KEY}={b_key}")):
        r = run_cli(*args, "--lease-namespace", ns, kubeconfig=kc)
        assert r.code == 1, r
        assert f"holds Lease {ns}/{b.lease}" in deferred_line(r.out, "bravo"), r
    doc = json.loads(run_cli("recover", "-n", ns, "bravo", "--lease-namespace", ns, "-o",
                             "json", kubeconfig=kc).out)
    assert [(i["result"], i["controller"]) for i in doc["items"]] == [("deferred", b.lease)]
    # --lease-name (alias --leader-election-id) is still accepted and never narrows the
    # check: naming shard a's Lease still leaves shard b's release alone
    for flag in ("--lease-name", "--leader-election-id"):
        r = run_cli("resume-owned", "-n", ns, "bravo", "--lease-namespace", ns, flag, a.lease,
                    kubeconfig=kc)
        assert r.code == 1 and f"holds Lease {ns}/{b.lease}" in r.out, r
    # release-fence by hand, scoped to the namespace only, leaves it too
    r = run_cli("release-fence", "-n", ns, "--lease-namespace", ns, kubeconfig=kc)
    assert r.code == 1, r
    assert "bravo NOT released: left alone: flux-plunger controller" in r.err, r
    assert "released 0 of 1 fenced HelmReleases" in r.out, r
    # not a single write to bravo, its storage intact
    after = cluster.get(ns, "bravo")
    assert held_by_us(cluster, ns, "bravo")
    assert after["metadata"]["resourceVersion"] == before
    assert "sh.helm.release.v1.bravo.v2" in cluster.secret_names(ns, "bravo")
    # status: which controller covers the release
    doc = json.loads(run_cli("status", "-n", ns, "--lease-namespace", ns, "-o", "json",
                             kubeconfig=kc).out)
    (item,) = [i for i in doc["items"] if i["metadata"]["name"] == "bravo"]
    assert item["controller"] == b.lease and item["state"] == "recovering"
    # --force acts anyway: the operator lifts the shard's in-flight suspension (shard b then
    # defers its recovery, storage intact, and takes the release up again later)
    r = run_cli("resume-owned", "-n", ns, "bravo", "--lease-namespace", ns, "--force",
                kubeconfig=kc)
    assert r.code == 0, r
    assert "bravo relinquished" in r.out and "lifted 1 flux-plunger suspensions" in r.out, r
    assert "sh.helm.release.v1.bravo.v2" in cluster.secret_names(ns, "bravo")


def test_a_crashed_shards_lease_stops_counting_once_it_has_expired(
        plane, cluster, ns, installs, tmp_path):
    """Shard b is killed mid-recovery (no drain, its Lease not given up): while its Lease
    is live the crash clean-up leaves bravo alone; once it has expired it lifts it."""
    b_key = unique("b")
    b = installs(f"flux-plunger-{b_key}", f'shard="{b_key}"')
    # a Lease long enough to run the verb inside it, short enough to wait out
    pb = b.start(tmp_path, "--handshake-timeout=120s", "--lease-duration=20s",
                 "--renew-deadline=10s", "--retry-period=2s")
    pb.wait_for(b.leads, 30, "shard b leads")
    stuck_release(cluster, ns, "bravo", labels={KEY: b_key})
    pb.wait_for(lambda: held_by_us(cluster, ns, "bravo"), 30, "shard b holds bravo")
    pb.kill()                                                   # SIGKILL: no drain
    spec = lease_spec(cluster, ns, b.lease)
    assert spec["holderIdentity"] and spec["leaseDurationSeconds"] == 20
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", ns, kubeconfig=plane.kubeconfig)
    assert r.code == 1 and f"holds Lease {ns}/{b.lease}" in r.out, r
    assert held_by_us(cluster, ns, "bravo")

    def expired() -> bool:
        import datetime as dt

        from kubectl_flux_plunger.core.detect import parse_timestamp
        renewed = parse_timestamp(lease_spec(cluster, ns, b.lease)["renewTime"])
        return dt.datetime.now(dt.timezone.utc) - renewed > dt.timedelta(seconds=21)
    eventually(expired, 60, "shard b's Lease to expire")
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", ns, kubeconfig=plane.kubeconfig)
    assert r.code == 0 and "bravo relinquished" in r.out, r
    assert not cluster.get(ns, "bravo")["spec"].get("suspend")
    assert "sh.helm.release.v1.bravo.v2" in cluster.secret_names(ns, "bravo")


def reference_lease(cluster, ns: str, *, renewed_ago: float = 0.0) -> dict:
    """The Lease the reference controller's manager writes (controller-runtime's leader
    election, --leader-elect, ID flux-plunger.cozystack.io): holder "<hostname>_<uuid>",
    MicroTime acquire/renew times, its LeaseDuration in seconds (115 at the chart default),
    and no annotations: it records nothing of what it watches."""
    import datetime as dt
    import uuid

    at = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=renewed_ago)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": C.LEASE_NAME, "namespace": ns},
            "spec": {"holderIdentity": f"flux-plunger-7d9f8b6c5-x2x4k_{uuid.uuid4()}",
                     "leaseDurationSeconds": 115, "acquireTime": at, "renewTime": at,
                     "leaseTransitions": 0}}
    existing = cluster.kube.get_lease(ns, C.LEASE_NAME)
    if existing is None:
        return cluster.kube.create_lease(ns, body)
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    return cluster.kube.update_lease(ns, C.LEASE_NAME, body)


def test_the_reference_controllers_lease_covers_every_release_until_it_expires(
        plane, cluster, ns):
    cluster.create_hr(ns, "left", labels={KEY: unique("s")})
    hold(cluster, ns, "left")
    lease = reference_lease(cluster, ns)
    holder = lease["spec"]["holderIdentity"]
    kc = plane.kubeconfig
    for verb in ("resume-owned", "recover", "release-fence"):
        r = run_cli(verb, "-n", ns, "--lease-namespace", ns, kubeconfig=kc)
        assert r.code == 1, r
        assert f"flux-plunger controller {holder} holds Lease {ns}/{C.LEASE_NAME}" in \
            r.out + r.err, r
        assert "it records no scope, as the reference controller's" in r.out + r.err, r
    assert held_by_us(cluster, ns, "left")
    # an identity that may GET Leases but not LIST them: warned, the contract's Lease read
    # by name — the reference controller's still stops it
    from .test_cli_verbs import CLI_RULES
    rules = copy.deepcopy(CLI_RULES)
    rules[-1]["verbs"] = ["get"]
    get_only = service_account_kubeconfig(plane, unique("getonly"), namespace=ns,
                                          cluster_rules=rules)
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", ns, kubeconfig=get_only)
    assert r.code == 1 and f"holds Lease {ns}/{C.LEASE_NAME}" in r.out, r
    (warning,) = r.err.splitlines()
    assert warning.startswith("warning: cannot list the Leases of the cluster (") and \
        warning.endswith(f"only in Lease {ns}/{C.LEASE_NAME}"), r
    assert held_by_us(cluster, ns, "left")
    reference_lease(cluster, ns, renewed_ago=116)                 # it stopped renewing
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", ns, kubeconfig=kc)
    assert r.code == 0 and "left relinquished" in r.out, r


# -- 6: two serve processes whose scopes overlap say so (issue 28) -------------------------

def scope_events(cluster, ns: str, lease: str) -> list[dict]:
    items = cluster.kube.request("LIST", "GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["reason"] == "ScopeOverlap"
            and e["involvedObject"].get("kind") == "Lease"
            and e["involvedObject"].get("name") == lease]


def overlaps(proc) -> float | None:
    """serve's flux_plunger_scope_overlaps (its one sample: the install's own lease label)."""
    values = [float(line.rsplit(" ", 1)[1])
              for line in proc._get(proc.metrics, "/metrics")[1].splitlines()
              if re.match(r"flux_plunger_scope_overlaps(\{[^}]*\})? ", line)]
    assert len(values) <= 1, values
    return values[0] if values else None


def warned(proc) -> list[dict]:
    out = []
    for line in proc.text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("level") == "warning" and "scope overlaps" in rec.get("msg", ""):
            out.append(rec)
    return out


def test_two_shards_with_one_selector_warn_loudly_and_stop_when_one_goes(
        plane, cluster, ns, installs, tmp_path):
    key = unique("k")
    x = installs(f"flux-plunger-{key}-x", f'selector="{KEY}={key}"')
    y = installs(f"flux-plunger-{key}-y", f'selector="{KEY}={key}"')
    assert x.lease != y.lease and x.selector == y.selector
    px = x.start(tmp_path, "--scope-overlap-check-interval=1s")
    py = y.start(tmp_path, "--scope-overlap-check-interval=1s")
    px.wait_for(x.leads, 30, "x leads")
    py.wait_for(y.leads, 30, "y leads")
    for me, proc, other in ((x, px, y), (y, py, x)):
        proc.wait_for(lambda proc=proc: overlaps(proc) == 1.0, 30, f"{me.name}'s gauge")
        proc.wait_for(lambda me=me: scope_events(cluster, ns, me.lease), 30,
                      f"the ScopeOverlap Event on {me.lease}")
        (event,) = scope_events(cluster, ns, me.lease)
        assert event["type"] == "Warning" and "cannot be shown disjoint" in event["message"]
        (line,) = warned(proc)
        assert line["scope"] == f"-A -l '{KEY}={key}'"
        (named,) = line["overlaps"]
        assert named.startswith(f"Lease {ns}/{other.lease} held by ") and \
            named.endswith(f"watching -A -l '{KEY}={key}'"), named
    # y stops (gives its Lease up): x's gauge goes back to 0 and says so
    assert py.stop() == 0
    px.wait_for(lambda: overlaps(px) == 0.0, 30, "x's gauge back to 0")
    px.wait_for(lambda: "scope overlaps this one's any more" in px.text(), 30, "x says so")


def test_two_shards_with_disjoint_selectors_say_nothing(plane, cluster, ns, installs, tmp_path):
    a_key, b_key = unique("a"), unique("b")
    a = installs(f"flux-plunger-{a_key}", f'shard="{a_key}"')
    b = installs(f"flux-plunger-{b_key}", f'shard="{b_key}"')
    main = installs("flux-plunger", f'selector="!{KEY}"')   # Flux's main instance beside them
    procs = [(i, i.start(tmp_path, "--scope-overlap-check-interval=1s")) for i in (a, b, main)]
    for i, proc in procs:
        proc.wait_for(i.leads, 30, f"{i.name} leads")
    mark = plane.audit_mark()

    def checked_twice(i) -> bool:   # two checks of each, all three leading
        return sum(e["verb"] == "list" and (e.get("objectRef") or {}).get("resource") == "leases"
                   for e in plane.audit_events(mark, user=i.user)) >= 2
    for i, proc in procs:
        proc.wait_for(lambda i=i: checked_twice(i), 30, f"{i.name} checked twice")
    for i, proc in procs:
        assert overlaps(proc) == 0.0 and warned(proc) == [] and \
            scope_events(cluster, ns, i.lease) == [], i.name


def test_the_kustomize_shard_overlay_sits_next_to_the_base(plane):
    """controller/kustomize-shard (one per shard, next to the base): every name its own, its
    pods told apart by the instance label, its selector and Lease; both apply side by side."""
    import subprocess

    from .test_deploy_manifests import KUSTOMIZE_DIR, render_kustomize

    base = render_kustomize()
    proc = subprocess.run(["kubectl", "kustomize", str(KUSTOMIZE_DIR.parent / "kustomize-shard")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import yaml
    shard = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = [{(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}
             for docs in (base, shard)]
    assert not names[0] & names[1], names[0] & names[1]
    assert "Namespace" not in {d["kind"] for d in shard}   # the base's namespace is shared
    dep = find(shard, "Deployment", "flux-plunger-shard1")
    args = container_args(dep)
    assert args[-2:] == [f"--selector={KEY}=shard1",
                         "--leader-election-id=flux-plunger-shard1.flux-plunger.cozystack.io"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "flux-plunger-shard1"
    assert dep["spec"]["selector"] != find(base, "Deployment", "flux-plunger")["spec"]["selector"]
    crb = find(shard, "ClusterRoleBinding", "flux-plunger-flux-plunger-shard1")
    assert crb["roleRef"]["name"] == "flux-plunger-flux-plunger-shard1"
    assert crb["subjects"][0]["name"] == "flux-plunger-shard1"
    out = apply(plane, base + shard, "test-kustomize-shard")
    assert out.count("serverside-applied") == len(base) + len(shard), out


# -- a release relabelled into another shard between the LIST and the fresh read ----------

@pytest.mark.parametrize("verb", ["recover", "resume-owned"])
def test_a_release_relabelled_out_of_the_selection_after_the_list_is_left_alone(
        plane, cluster, ns, monkeypatch, capsys, verb):
    """The LIST selects it (shard a's label); before the fresh read that decides, it moves to
    shard b.  The verb, run in this process so the relabel lands exactly there, decides
    nothing on it and writes nothing: the check of the fresh read against -l."""
    from kubectl_flux_plunger import kube as kube_mod
    from kubectl_flux_plunger.cli import main

    a_key, b_key = unique("a"), unique("b")
    stuck_release(cluster, ns, "moving", labels={KEY: a_key})
    if verb == "resume-owned":
        hold(cluster, ns, "moving")   # as a crash of shard a's recovery leaves it ...
    before = cluster.get(ns, "moving")
    moved: list[str] = []
    real_init = kube_mod.Kube.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)

        def before_request(method, path):
            # the fresh read after the LIST (a watch-list or a GET of the release)
            if "/helmreleases" in path and method != "LIST" and not moved:
                moved.append(f"{method} {path}")   # ... and shard b takes it over
                cluster.merge(ns, "moving", {"metadata": {"labels": {KEY: b_key}}})
        self.before_request = before_request
    monkeypatch.setattr(kube_mod.Kube, "__init__", init)
    monkeypatch.setattr("sys.argv", ["kubectl-flux_plunger"])
    code = main([verb, "-n", ns, "-l", f"{KEY}={a_key}", "--lease-namespace", ns,
                 "--kubeconfig", str(plane.kubeconfig)])
    out = capsys.readouterr().out
    assert moved, "the relabel never landed"
    assert code == 0, out
    assert f"moving unchanged: not selected by -l '{KEY}={a_key}'" in out, out
    after = cluster.get(ns, "moving")
    # nothing written since the relabel: the same spec, finalizers and annotations
    assert after["metadata"]["labels"][KEY] == b_key
    for field in ("finalizers", "annotations"):
        assert after["metadata"].get(field) == before["metadata"].get(field), field
    assert after["spec"] == before["spec"]
    assert "sh.helm.release.v1.moving.v2" in cluster.secret_names(ns, "moving")
