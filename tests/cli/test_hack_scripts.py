"""The set-up and test scripts (issue 28): ./hack/test.sh stops the Docker engine it started
when the run ends — however it ends — and says so in its last lines, unless KIND_ENGINE_KEEP=1
asks it to leave the engine for the next run; an engine that was already running is never
stopped.  ./hack/setup.sh takes --demo (what ./hack/demo.sh runs) or --stage early|late and
nothing else; the late stage test.sh starts in the background is stopped with the run when the
run ends before it (its Go builds included: its whole process group).

test.sh runs for real in a copy of the checkout's hack/ whose engine.sh and setup.sh are
stand-ins (no Docker engine is started: the stand-in records what it is asked to do), and
whose set-up fails, so the run ends right after the engine step — the path on which a
forgotten engine used to be left behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli
ROOT = Path(__file__).resolve().parents[2]

FAKE_ENGINE = """#!/usr/bin/env bash
# stands in for hack/kind/engine.sh: an engine is "running" while $STATE exists
echo "$1" >> "$CALLS"
case "$1" in
  env) [ -f "$STATE" ] && echo "export DOCKER_HOST=unix:///fake.sock" ;;
  start) touch "$STATE"; echo "export DOCKER_HOST=unix:///fake.sock" ;;
  stop) rm -f "$STATE"; echo "stopped dockerd 4242 and its children 4243" ;;
esac
"""
FAILING_SETUP = "#!/usr/bin/env bash\necho 'set-up fails here' >&2\nexit 3\n"


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "checkout"
    (root / "hack" / "kind").mkdir(parents=True)
    shutil.copy(ROOT / "hack" / "test.sh", root / "hack" / "test.sh")
    for path, text in (("hack/kind/engine.sh", FAKE_ENGINE), ("hack/setup.sh", FAILING_SETUP)):
        (root / path).write_text(text)
        (root / path).chmod(0o755)
    return root


def run_test_sh(root: Path, tmp_path: Path, running: bool, **env: str):
    state, calls = tmp_path / "engine-running", tmp_path / "calls"
    if running:
        state.touch()
    e = {k: v for k, v in os.environ.items() if not k.startswith("KIND_ENGINE")}
    e.update(STATE=str(state), CALLS=str(calls), **env)
    proc = subprocess.run(["bash", str(root / "hack" / "test.sh")], cwd=root, env=e,
                          capture_output=True, text=True, timeout=60)
    done = calls.read_text().split() if calls.exists() else []
    return proc, done, state.exists()


def test_an_engine_the_run_started_is_stopped_at_the_end(checkout, tmp_path):
    proc, calls, running = run_test_sh(checkout, tmp_path, False, KIND_ENGINE="start")
    assert proc.returncode == 3, proc            # the set-up's failure, not hidden
    assert calls == ["env", "start", "stop"] and not running
    assert proc.stdout.splitlines()[-2:] == [
        "stopped dockerd 4242 and its children 4243",
        "== stopped the Docker engine this run started (KIND_ENGINE_KEEP=1 keeps it for the "
        "next run)"], proc.stdout


def test_keep_leaves_it_running_and_says_how_to_stop_it(checkout, tmp_path):
    proc, calls, running = run_test_sh(checkout, tmp_path, False, KIND_ENGINE="start",
                                       KIND_ENGINE_KEEP="1")
    assert proc.returncode == 3 and calls == ["env", "start"] and running
    assert proc.stdout.splitlines()[-1] == (
        "== the Docker engine this run started is left running (KIND_ENGINE_KEEP=1); "
        "hack/kind/engine.sh stop stops it")


def test_an_engine_running_before_the_run_is_left_alone(checkout, tmp_path):
    proc, calls, running = run_test_sh(checkout, tmp_path, True, KIND_ENGINE="start")
    assert proc.returncode == 3 and calls == ["env", "start"] and running
    assert proc.stdout.splitlines()[-1] == (
        "== the Docker engine was running before this run: left running")


def test_without_kind_engine_start_no_engine_is_touched(checkout, tmp_path):
    proc, calls, _ = run_test_sh(checkout, tmp_path, False)
    assert proc.returncode == 3 and calls == [] and proc.stdout == ""


def test_setup_takes_demo_or_a_stage_and_nothing_else():
    for args in (["--everything"], ["--stage"], ["--stage", "middle"]):
        proc = subprocess.run(["bash", str(ROOT / "hack" / "setup.sh"), *args],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (args, proc)
        assert proc.stderr == f"usage: {ROOT / 'hack' / 'setup.sh'} [--demo | --stage early|late]\n"
    demo = (ROOT / "hack" / "demo.sh").read_text()
    assert "./hack/setup.sh --demo\n" in demo


STAGED_SETUP = """#!/usr/bin/env bash
# stands in for hack/setup.sh: the early stage passes; the late one (started in the
# background) starts a child that would run long, as a Go build does, and records both pids
case "$2" in
  early) exit 0 ;;
  late) sleep 300 & echo "$$ $!" > "$PIDS"; wait ;;
esac
"""
FAILING_LINT = "#!/usr/bin/env bash\nfor _ in $(seq 100); do [ -s \"$PIDS\" ] && break; sleep 0.1; done\nexit 4\n"


def test_a_run_that_ends_early_stops_the_background_set_up_and_its_builds(checkout, tmp_path):
    for path, text in (("hack/setup.sh", STAGED_SETUP), ("hack/lint.sh", FAILING_LINT)):
        (checkout / path).write_text(text)
        (checkout / path).chmod(0o755)
    pids = tmp_path / "pids"
    proc, _, _ = run_test_sh(checkout, tmp_path, False, PIDS=str(pids))
    assert proc.returncode == 4, proc                # lint's failure, not hidden
    late = [int(p) for p in pids.read_text().split()]
    assert len(late) == 2, late
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in late) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in late if _alive(p)], "the background set-up outlived the run"
    assert "== stopped the background set-up (its log: " in proc.stdout, proc.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie no one reaped yet is gone too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
