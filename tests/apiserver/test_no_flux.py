"""A cluster without Flux (a second real control plane, no CRDs installed): every verb
says so in one line and exits 1, instead of a traceback or "No resources found"."""
from __future__ import annotations

import pytest

from tests.conftest import run_cli
from testplane.plane import ControlPlane


@pytest.fixture(scope="module")
def bare_plane(tmp_path_factory):
    plane = ControlPlane(tmp_path_factory.mktemp("bare")).start(crds=False)
    yield plane
    plane.stop()


@pytest.mark.parametrize("args", [("status", "-A"), ("recover", "-A"), ("resume-owned", "-A"),
                                  ("release-fence", "-A"), ("status", "-n", "default", "x")])
def test_missing_crd_is_one_clear_line(bare_plane, args):
    res = run_cli(*args, kubeconfig=bare_plane.kubeconfig)
    assert res.code == 1, res
    assert res.err.strip().splitlines() == [
        'error: the server doesn\'t have a resource type "helmreleases" in '
        'helm.toolkit.fluxcd.io/v2 (is Flux installed?)'], res
    assert res.out == ""
