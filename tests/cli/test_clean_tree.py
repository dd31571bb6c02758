"""The work tree stays clean (issue 24): a pytest session that leaves a new file in the
checkout fails, whichever tier it is (tests/conftest.py compares ``git status --porcelain``
at the start and the end of the session), and kubectl started by the tests keeps its caches
out of the tree (``KUBECACHEDIR``).  Processes: a nested pytest session, the real kubectl."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli
ROOT = Path(__file__).resolve().parents[2]


def _nested_pytest(test_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.conftest", str(test_file)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_session_that_leaves_a_file_in_the_checkout_fails(tmp_path):
    stray = ROOT / f"kfp-stray-{uuid.uuid4().hex[:8]}.txt"
    probe = tmp_path / "test_probe.py"
    probe.write_text(f"from pathlib import Path\n\ndef test_leaves():\n"
                     f"    Path({str(stray)!r}).write_text('left behind')\n")
    try:
        proc = _nested_pytest(probe)
    finally:
        stray.unlink(missing_ok=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "error: the test run left 1 new entry in the work tree" in proc.stderr
    assert f"?? {stray.name}" in proc.stderr


def test_a_session_that_leaves_nothing_passes(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_nothing_left():\n    assert True\n")
    proc = _nested_pytest(probe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "work tree" not in proc.stderr


def test_kubectl_in_the_session_keeps_its_cache_out_of_home_and_the_tree():
    """The session points KUBECACHEDIR at a directory of its own, so a kubectl a test starts
    (with or without HOME) never writes ``.kube/cache`` into the checkout or the home."""
    cache = os.environ.get("KUBECACHEDIR", "")
    assert cache and not Path(cache).resolve().is_relative_to(ROOT)
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not on PATH: the cache directory kubectl would pick is unchecked"
    env = {k: v for k, v in os.environ.items() if k != "HOME"}
    proc = subprocess.run([kubectl, "options"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert f"--cache-dir='{cache}'" in proc.stdout, proc.stdout[-2000:]
