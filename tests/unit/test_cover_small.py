"""Small pieces no tier reached: the pre-rendered help generator's --check and write paths,
cobra completion's directives and its never-a-traceback rule, and the one-line renderings of
fence and outcome results."""
from __future__ import annotations

import os

import pytest

from kubectl_flux_plunger import cli
from kubectl_flux_plunger.cli import argv, complete, prerender
from kubectl_flux_plunger.executor.outcome import Outcome, Result
from kubectl_flux_plunger.core.plan import Row
from kubectl_flux_plunger.verbs.release_fence import FenceResult

pytestmark = pytest.mark.unit


# -- the pre-rendered help generator ----------------------------------------------------------

@pytest.fixture
def target(tmp_path, monkeypatch):
    path = tmp_path / "_prerendered.py"
    monkeypatch.setattr(prerender, "TARGET", path)
    monkeypatch.setattr(prerender, "source", lambda: "TEXT = {}\n")
    return path


def test_prerender_check_says_what_to_run_when_stale(target, capsys):
    assert prerender.main(["--check"]) == 1              # missing counts as stale
    assert "is out of date: run python -m kubectl_flux_plunger.cli.prerender" in \
        capsys.readouterr().err
    target.write_text("old\n")
    assert prerender.main(["--check"]) == 1
    assert target.read_text() == "old\n"                 # --check never writes


def test_prerender_writes_only_when_the_text_changed(target, capsys):
    assert prerender.main([]) == 0
    assert target.read_text() == "TEXT = {}\n" and capsys.readouterr().out == f"wrote {target}\n"
    assert prerender.main([]) == 0 and capsys.readouterr().out == ""
    assert prerender.main(["--check"]) == 0


def test_prerender_refuses_an_invocation_that_fails(monkeypatch):
    monkeypatch.setattr(prerender, "run_cli", lambda args, prog, cols: (2, "usage\n"))
    with pytest.raises(RuntimeError, match=r"^kubectl flux-plunger --help exited 2: 'usage\\n'"):
        prerender.render()


def test_run_cli_restores_argv_and_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "133")
    saved = list(os.sys.argv)
    code, out = prerender.run_cli(["--version"], "flux plunger", 80)
    assert code == 0 and out == f"{cli.__version__}\n"
    assert os.environ["COLUMNS"] == "133" and os.sys.argv == saved


# -- cobra completion ---------------------------------------------------------------------------

def _complete(capsys, words):
    assert complete.cobra_complete(cli.cli, "kubectl flux-plunger", words) == 0
    return capsys.readouterr().out.splitlines()


def test_completion_of_no_words_offers_the_verbs(capsys):
    out = _complete(capsys, [])
    assert out[-1] == f":{complete.NO_FILE}" and "status" in out and "recover" in out


def test_completion_of_a_directory_flag_asks_the_shell_for_directories(capsys):
    assert _complete(capsys, ["recover", "--backup-dir", ""]) == [f":{complete.DIRS}"]


def test_completion_that_fails_answers_the_error_directive_only(capsys, monkeypatch):
    def broken(group, args):
        raise RuntimeError("boom")

    monkeypatch.setattr(argv, "hoist_global_flags", broken)
    assert _complete(capsys, ["status", ""]) == [f":{complete.ERROR}"]


# -- one-line renderings ---------------------------------------------------------------------

@pytest.mark.parametrize(("result", "line"), [
    (FenceResult("a", "b", False, False, "forbidden"), "NOT released a/b: forbidden"),
    (FenceResult("a", "b", True, True, ""),
     "released the uninstall fence from a/b without an uninstall: helm-controller had not "
     "handled it"),
    (FenceResult("a", "b", True, False, "the release is gone"),
     "released the uninstall fence from a/b (the release is gone)"),
    (FenceResult("a", "b", True, False, ""), "released the uninstall fence from a/b"),
])
def test_fence_result_lines(result, line):
    assert result.line() == line
    assert result.as_dict()["released"] is result.released


def test_outcome_as_dict_names_the_backup_only_when_there_is_one():
    o = Outcome("apps", "demo", Result.RECOVERED, "deleted v3", Row.LIVE_STUCK, 3,
                steps=["suspend"])
    d = o.as_dict()
    assert d == {"namespace": "apps", "name": "demo", "result": "recovered",
                 "detail": "deleted v3", "row": str(Row.LIVE_STUCK), "revision": 3,
                 "failed": False, "steps": ["suspend"]}
    o.backup = "file /b/x.json"
    assert o.as_dict()["backup"] == "file /b/x.json"
    d["steps"].append("x")
    assert o.steps == ["suspend"]                  # a copy, not the outcome's own list


# -- release-fence: a fence that keeps coming back, the global deadline -------------------------

class _Prims:
    """Executor stand-in: the suspension lift hands the release on; every fence removal
    leaves it fenced again (a controller still running)."""

    def __init__(self, kube=None):
        self.removals = 0

    def retry_on_conflict(self, hr, attempt, **kwargs):
        return hr

    def lift_sole_suspension(self, hr, *args, **kwargs):   # executor.primitives' lift
        return hr

    def remove_fence(self, hr, **kwargs):
        self.removals += 1
        return hr


def test_a_fence_that_keeps_coming_back_is_not_released(monkeypatch):
    from kubectl_flux_plunger.core import constants
    from kubectl_flux_plunger.verbs import release_fence as rf

    from . import builders as B

    made = []
    monkeypatch.setattr(rf, "Executor", lambda kube: made.append(_Prims()) or made[-1])
    res = rf.release_one(None, B.hr("a", "apps", finalizers=[constants.FENCE]), window=5)
    assert (res.released, res.detail) == (False, "the fence could not be removed: the fence "
                                          "keeps coming back; is a flux-plunger controller "
                                          "still running?")
    assert made[0].removals == rf.MAX_FENCE_REMOVALS


def test_the_global_deadline_reports_what_was_not_released(monkeypatch):
    import threading

    from kubectl_flux_plunger.core import constants
    from kubectl_flux_plunger.verbs import release_fence as rf

    from . import builders as B

    started, gate = threading.Event(), threading.Event()
    now = [100.0]

    class Clock:
        @staticmethod
        def monotonic():
            return now[0]

    def release_one(kube, hr, window, deadline, stop, covered=None):
        name = hr["metadata"]["name"]
        if name == "boom":
            raise ValueError("bad data")
        started.set()
        gate.wait(10)                      # held until the test ends
        return FenceResult("apps", name, True, False, "")

    def wait_then_pass_the_deadline(pending, timeout, return_when):
        # hand back the one that failed at once; then the deadline passes while "slow" runs
        assert started.wait(10)
        done = {f for f in pending if f.done()}
        now[0] = 200.0
        return done, pending - done

    monkeypatch.setattr(rf, "time", Clock)
    monkeypatch.setattr(rf, "release_one", release_one)
    monkeypatch.setattr(rf, "wait", wait_then_pass_the_deadline)
    fenced = [B.hr(n, "apps", finalizers=[constants.FENCE]) for n in ("boom", "slow", "queued")]
    fenced.insert(1, B.hr("unfenced", "apps"))
    try:
        results = rf.run(None, fenced, deadline=150.0, concurrency=1)
    finally:
        gate.set()
    assert [(r.name, r.released, r.detail) for r in results] == [
        ("boom", False, "unexpected error: bad data"),
        ("slow", False, "the deadline passed while it was being released (stopped before its "
                        "next write; one already sent may still release it)"),
        ("queued", False, "the deadline passed before it could be released"),
    ]
    assert rf.summary(results) == "released 0 of 3 fenced HelmReleases, 0 without an uninstall"
