"""selector.py: Kubernetes label selectors parsed, validated and matched as apimachinery's
labels.Parse does (every form Flux's sharding uses), the one-line usage error a bad one gives
on every verb and serve before any request (golden), and the pieces of sharding built on it:
the Lease's recorded scope (controller_lease.covers), the executor's check of a fresh read,
the metrics that do not count a release outside the selection."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from kubectl_flux_plunger import cli
from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.cli import session
from kubectl_flux_plunger.kube.controller_lease import ControllerLease, read_all
from kubectl_flux_plunger.executor import Executor, Options, Outcome, Result
from kubectl_flux_plunger.core.selector import Op, SelectorError, parse
from kubectl_flux_plunger.serve.metrics import Metrics

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
KEY = "sharding.fluxcd.io/key"


def labels(**kv: str) -> dict[str, str]:
    return {k.replace("__", "/").replace("_", "."): v for k, v in kv.items()}


@pytest.mark.parametrize(("text", "ops", "canonical"), [
    ("a=b", [Op.EQUALS], "a=b"),
    ("a==b", [Op.EQUALS], "a=b"),
    ("a = b", [Op.EQUALS], "a=b"),
    ("a!=b", [Op.NOT_EQUALS], "a!=b"),
    ("a", [Op.EXISTS], "a"),
    ("!a", [Op.NOT_EXISTS], "!a"),
    (" ! a ", [Op.NOT_EXISTS], "!a"),
    ("a in (x, y)", [Op.IN], "a in (x,y)"),
    ("a in(x)", [Op.IN], "a in (x)"),
    ("a notin (x,y)", [Op.NOT_IN], "a notin (x,y)"),
    ("a in (x,)", [Op.IN], "a in (x,)"),  # an empty value, as apimachinery reads it
    ("a in (x,x)", [Op.IN], "a in (x)"),
    ("a=", [Op.EQUALS], "a="),
    ("a>1", [Op.GT], "a>1"),
    ("a<3", [Op.LT], "a<3"),
    (f"{KEY}=shard1", [Op.EQUALS], f"{KEY}=shard1"),
    (f"!{KEY}", [Op.NOT_EXISTS], f"!{KEY}"),
    (f"{KEY} in (a,b),app notin (x),team,!legacy,tier!=db",
     [Op.IN, Op.NOT_IN, Op.EXISTS, Op.NOT_EXISTS, Op.NOT_EQUALS],
     f"{KEY} in (a,b),app notin (x),team,!legacy,tier!=db"),
    ("example.com/My_Key-1.x=Val_1.-z", [Op.EQUALS], "example.com/My_Key-1.x=Val_1.-z"),
])
def test_good_forms_parse(text, ops, canonical):
    s = parse(text)
    assert [r.op for r in s.requirements] == ops
    assert str(s) == canonical
    assert s.text == text.strip()


@pytest.mark.parametrize(("text", "why"), [
    ("a b", "expected an operator after 'a'"),
    ("a=b c", "expected ',' or the end of the selector, found 'c'"),
    ("a=b,", "expected a label key, found the end of the selector"),
    (",a", "expected a label key, found ','"),
    ("=b", "expected a label key, found '='"),
    ("a in (x", "expected ',' or ')' in the values of 'a', found the end of the selector"),
    ("a in x", "expected '(' after 'in'/'notin' for 'a', found 'x'"),
    ("a in ()", "'in'/'notin' for 'a' needs at least one value"),
    ("a notin ()", "'in'/'notin' for 'a' needs at least one value"),
    ("!a=b", "'!a' (does not exist) takes no operator, found '='"),
    ("a>x", "invalid value 'x' for 'a': '>' needs an integer"),
    ("a=b=c", "expected ',' or the end of the selector, found '='"),
    ("a==", "a="),  # parses: an empty value (checked below, not an error)
    ("Example.com/a=b", "invalid key 'Example.com/a': the prefix must be a DNS subdomain"),
    ("/a=b", "invalid key '/a': the prefix before '/' must not be empty"),
    ("x/=b", "invalid key 'x/': the name part must not be empty"),
    ("-a=b", "invalid key '-a': the name part must be at most 63"),
    ("a" * 64 + "=b", "the name part must be at most 63"),
    ("a=" + "v" * 64, "a label value must be empty or at most 63"),
    ("a=-v", "invalid value '-v' for 'a'"),
    ("a in (x,-y)", "invalid value '-y' for 'a'"),
    ("in=b", "expected a label key, found 'in'"),
    ("a=(", "expected a value for 'a', found '('"),
    ("a in (=)", "expected a value or ')' for 'a', found '='"),
    ("", "the selector is empty"),
])
def test_bad_forms_are_one_line_errors(text, why):
    if why == "a=":
        assert str(parse(text)) == "a="
        return
    with pytest.raises(SelectorError) as exc:
        parse(text)
    msg = str(exc.value)
    assert why in msg and "\n" not in msg
    if text:
        assert msg.startswith(f"invalid label selector {text!r}: ")


@pytest.mark.parametrize(("text", "matching", "not_matching"), [
    (f"{KEY}=a", [{KEY: "a"}], [{}, {KEY: "b"}]),
    (f"{KEY}!=a", [{}, {KEY: "b"}], [{KEY: "a"}]),  # != also selects the key's absence
    (f"!{KEY}", [{}, {"app": "x"}], [{KEY: "a"}, {KEY: ""}]),
    (KEY, [{KEY: ""}, {KEY: "a"}], [{}]),
    (f"{KEY} in (a,b)", [{KEY: "a"}, {KEY: "b"}], [{}, {KEY: "c"}]),
    (f"{KEY} notin (a,b)", [{}, {KEY: "c"}], [{KEY: "a"}, {KEY: "b"}]),
    (f"{KEY}=", [{KEY: ""}], [{}, {KEY: "a"}]),
    ("n>2", [{"n": "3"}], [{}, {"n": "2"}, {"n": "x"}]),
    ("n<2", [{"n": "1"}, {"n": "-5"}], [{}, {"n": "2"}]),  # the label may be negative
    (f"{KEY}=a,app", [{KEY: "a", "app": "x"}], [{KEY: "a"}, {"app": "x"}]),
])
def test_matching_follows_kubernetes(text, matching, not_matching):
    s = parse(text)
    for have in matching:
        assert s.matches(have), (text, have)
    for have in not_matching:
        assert not s.matches(have), (text, have)


def test_objects_without_labels_match_as_empty_labels():
    s = parse(f"!{KEY}")
    assert s.matches_object({"metadata": {"name": "x"}})
    assert s.matches_object({"metadata": {"labels": None}})
    assert not parse(KEY).matches_object({})


# -- the CLI: one usage error, exit 2, before any request --------------------------------

BAD = "sharding.fluxcd.io/key in (a b)"


@pytest.mark.parametrize("argv", [
    ["status", "-l", BAD],
    ["recover", "-A", "-l", BAD],
    ["resume-owned", "-A", "--selector", BAD],
    ["release-fence", "-A", f"--selector={BAD}"],
    ["serve", "-l", BAD],
])
def test_a_bad_selector_is_one_usage_error_before_anything_is_read(capsys, monkeypatch,
                                                                   tmp_path, argv):
    # a kubeconfig that does not exist: reading it (let alone a request) would fail otherwise
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setattr(session, "connect", lambda *a, **kw: pytest.fail("connected"))
    code = cli.main(["--kubeconfig", str(tmp_path / "absent"), *argv]
                    if argv[0] != "serve" else argv)
    out, err = capsys.readouterr()
    assert code == cli.Exit.USAGE and out == ""
    first, *rest = err.splitlines()
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / "bad-selector.txt").write_text(first + "\n")
    assert first == (GOLDEN / "bad-selector.txt").read_text().rstrip("\n")
    assert [line for line in rest if not line.startswith("See '")] == []


def test_a_bad_lease_name_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setattr(session, "connect", lambda *a, **kw: pytest.fail("connected"))
    code = cli.main(["recover", "-A", "--lease-name", "Shard_1"])
    err = capsys.readouterr().err
    assert code == cli.Exit.USAGE
    assert "error: --lease-name 'Shard_1': a Lease name must be a DNS subdomain" in err
    code = cli.main(["serve", "--leader-election-id", "a/b"])
    err = capsys.readouterr().err
    assert code == cli.Exit.USAGE
    assert "error: --leader-election-id 'a/b': a Lease name must be a DNS subdomain" in err


# -- what is built on it ------------------------------------------------------------------

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def hr(ns: str, name: str, **lab: str) -> dict:
    return {"metadata": {"namespace": ns, "name": name, "labels": dict(lab)}}


def lease(selector: str | None, namespace: str | None = None, *, running: bool = True
          ) -> ControllerLease:
    return ControllerLease("fp", "h" if running else "", NOW, 15.0, running,
                           name="x", selector=selector, watch_namespace=namespace)


def test_a_lease_covers_what_its_controller_watches():
    a = hr("apps", "a", **{KEY: "a"})
    main = hr("apps", "m")
    assert lease(f"{KEY}=a").covers(a) and not lease(f"{KEY}=a").covers(main)
    assert lease(f"!{KEY}").covers(main) and not lease(f"!{KEY}").covers(a)
    assert lease(None).covers(a) and lease("").covers(main)  # unrecorded: everything
    assert lease("", "apps").covers(main) and not lease("", "other").covers(main)
    assert lease("not a selector (").covers(a)  # unreadable: assume it may act


class _Leases:
    def __init__(self, items=None, error=None):
        self.items, self.error = items or [], error

    def list_cluster_leases(self):
        return self.list_leases(None)

    def list_leases(self, namespace):
        if self.error:
            raise self.error
        return self.items

    def get_lease(self, namespace, name):
        return None


def _lease_obj(name, annotations=None):
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"holderIdentity": "pod_1", "renewTime": "2026-12-01T11:59:58.000000Z",
                     "leaseDurationSeconds": 15}}


def test_read_all_finds_every_flux_plunger_lease_with_one_list():
    from kubectl_flux_plunger.kube import KubeError
    items = [_lease_obj("zz.flux-plunger.cozystack.io",
                        {constants.LEASE_SELECTOR_ANNOTATION: f"{KEY}=b",
                         constants.LEASE_NAMESPACE_ANNOTATION: ""}),
             _lease_obj("helm-controller-leader-election"),  # not ours
             _lease_obj("aa.flux-plunger.cozystack.io",
                        {constants.LEASE_SELECTOR_ANNOTATION: f"{KEY}=a"})]
    got = read_all(_Leases(items), "fp", NOW)
    assert [c.name for c in got] == [constants.LEASE_NAME, "aa.flux-plunger.cozystack.io",
                                     "zz.flux-plunger.cozystack.io"]
    assert not got[0].holder  # the contract's Lease is absent: nobody holds it
    assert got[1].running and got[1].selector == f"{KEY}=a"
    assert "(watching -l 'sharding.fluxcd.io/key=b')" in got[2].describe(NOW)
    # a refused LIST falls back to the GET of the contract's Lease
    fallback = read_all(_Leases(error=KubeError(403, "Forbidden", "no")), "fp", NOW)
    assert [c.name for c in fallback] == [constants.LEASE_NAME]


class _Kube:
    dry_run = False
    watch_list = False
    request_timeout = 5.0

    def __init__(self, obj):
        self.obj, self.writes = obj, 0

    def get_hr(self, ns, name):
        return self.obj


def test_a_fresh_read_outside_the_selector_decides_nothing():
    from tests.unit import builders as B
    stuck = B.hr("x", "apps", conditions=[B.stuck_condition()])
    stuck["metadata"]["labels"] = {KEY: "b"}  # relabelled into shard b since the LIST
    ex = Executor(_Kube(stuck), options=Options(selector=parse(f"{KEY}=a")))
    out = ex.reconcile("apps", "x")
    assert out.result == Result.UNCHANGED and not out.selected and out.steps == []
    assert "not selected by -l 'sharding.fluxcd.io/key=a'" in out.detail
    settled = ex.settle(stuck)
    assert settled.result == Result.UNCHANGED and not settled.selected


def test_metrics_do_not_count_a_release_outside_the_selection():
    m = Metrics()
    m.observe(Outcome("apps", "x", Result.UNCHANGED, "", selected=False))
    assert sum(m.reconciles.values()) == 0
    m.observe(Outcome("apps", "x", Result.UNCHANGED, ""))
    assert sum(m.reconciles.values()) == 1
