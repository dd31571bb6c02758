"""hack/mutation.py's own logic (issue 40): the table, the batches, the survivors' list and
fingerprints — what decides whether a mutation run passes — and testplane's shared plane the
apiserver targets join."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from testplane.plane import ControlPlane, PlaneError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("hack_mutation", ROOT / "hack" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_mutation"] = module   # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("hack_mutation", None)


def test_every_target_names_what_exists_and_every_function_it_counts(mutation):
    names = [t.name for t in mutation.TARGETS]
    assert len(names) == len(set(names))
    for t in mutation.TARGETS:
        assert (ROOT / t.source).is_file(), t
        for test in t.tests + t.deselect:
            assert (ROOT / test.split("::")[0]).exists(), (t.name, test)
        text = (ROOT / t.source).read_text()
        for fn in t.functions:
            assert f"def {fn.rsplit('.', 1)[-1]}(" in text, (t.name, fn)
        assert t.tier in mutation.GOALS


def test_every_explained_survivor_names_a_target_and_says_why(mutation):
    explained = mutation.load_explained(mutation.SURVIVORS)
    names = {t.name for t in mutation.TARGETS}
    assert explained
    for (module, _function, fingerprint), why in explained.items():
        assert module in names, module
        assert len(fingerprint) == 10, fingerprint
        # report() counts a line as equivalent by this word, anything else as message-only
        assert why.startswith(("equivalent", "message-only: ")), why


def test_a_survivors_line_without_a_reason_is_refused(mutation, tmp_path):
    path = tmp_path / "survivors.txt"
    path.write_text("# a comment\n\nplan decide 0123456789\n")
    with pytest.raises(SystemExit, match=r"survivors.txt:3: expected"):
        mutation.load_explained(path)


def test_targets_sharing_their_tests_share_a_batch_but_never_one_file(mutation):
    T = mutation.Target
    a = T("a", "x/a.py", ("tests/unit",), "core")
    b = T("b", "x/b.py", ("tests/unit",), "core")
    a2 = T("a2", "x/a.py", ("tests/unit",), "core", functions=("f",))
    c = T("c", "x/c.py", ("tests/unit", "tests/apiserver/t.py"), "apiserver")
    one = T("one", "x/d.py", ("tests/unit",), "core", max_jobs=1)
    got = mutation.batches([a, c, b, a2, one])
    assert [[t.name for t in batch] for batch in got] == [["a", "b"], ["c"], ["a2"], ["one"]]
    assert mutation.batch_name([a]) == "a"
    assert mutation.batch_name([a, b]).startswith("batch-")
    assert mutation.batch_name([a, b]) != mutation.batch_name([b, a])


def test_the_mutant_patterns_cover_a_whole_module_or_only_its_functions(mutation):
    T = mutation.Target
    whole = T("p", "kubectl_flux_plunger/core/plan.py", ("tests/unit",), "core")
    some = T("s", "kubectl_flux_plunger/core/storage.py", ("tests/unit",), "core",
             functions=("choose_revision", "Revision.from_secret"))
    assert mutation._mutant_globs(whole) == ["kubectl_flux_plunger.core.plan.*"]
    assert mutation._mutant_globs(some) == [
        "kubectl_flux_plunger.core.storage.x_choose_revision__mutmut_*",
        "kubectl_flux_plunger.core.storage.x\u01c1Revision\u01c1from_secret__mutmut_*",
    ]
    assert mutation._function_of(
        "kubectl_flux_plunger.core.storage.x\u01c1Revision\u01c1from_secret__mutmut_12"
    ) == "Revision.from_secret"
    assert mutation._function_of("kubectl_flux_plunger.core.plan.x_decide__mutmut_3") == "decide"


DIFF = """--- a.py
+++ a.py
@@ -1,3 +1,3 @@
 def f():
-    return g("it went")
+    return g("XXit wentXX")
"""


def test_a_string_only_mutant_is_known_by_its_line_not_by_how_it_is_garbled(mutation):
    upper = DIFF.replace('"XXit wentXX"', '"IT WENT"')
    other = DIFF.replace('g("XXit wentXX")', 'g(None)')
    assert mutation.string_only(DIFF) and mutation.string_only(upper)
    assert not mutation.string_only(other)
    assert mutation.fingerprint(DIFF) == mutation.fingerprint(upper)
    assert mutation.fingerprint(DIFF).startswith("s")
    assert mutation.fingerprint(other) != mutation.fingerprint(DIFF)
    # independent of the context lines and of the mutant's number
    moved = DIFF.replace(" def f():", " def h():")
    assert mutation.fingerprint(moved) == mutation.fingerprint(DIFF)


def test_a_shared_plane_is_joined_from_its_plane_json_and_its_audit_log_is_readable(tmp_path):
    (tmp_path / "plane.json").write_text(json.dumps(
        {"port": 6443, "files": {"serving_ca": str(tmp_path / "ca.crt")}}))
    (tmp_path / "audit.log").write_text(json.dumps({"userAgent": "x", "verb": "get"}) + "\n")
    plane = ControlPlane.shared(tmp_path)
    assert plane.server == "https://127.0.0.1:6443"
    assert plane.files == {"serving_ca": tmp_path / "ca.crt"}
    assert not plane.owned   # never stopped by the joining session
    assert [e["verb"] for e in plane.audit_events()] == ["get"]
    plane.stop()
    assert (tmp_path / "plane.json").is_file()


def test_no_shared_plane_is_a_plane_error(tmp_path):
    with pytest.raises(PlaneError, match="no running control plane in"):
        ControlPlane.shared(tmp_path)


def test_an_existing_clusters_audit_log_stays_unreadable(tmp_path):
    plane = ControlPlane(tmp_path)
    plane.owned = False   # as existing() leaves it, without installing CRDs anywhere
    with pytest.raises(PlaneError, match="only available on a control plane started here"):
        plane.audit_events()
