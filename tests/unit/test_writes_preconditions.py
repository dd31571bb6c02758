"""Every write carries the read's resourceVersion and uid, or is not built (issue 40: each
test here kills mutants of core/writes.py the unit tier let survive).  An empty or
non-string resourceVersion or uid is no evidence: a body without it would be an
unconditional write (a 409 would no longer stop it, nor would a re-created release)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants

from .builders import hr
from .test_writes import BUILDERS

pytestmark = pytest.mark.unit

IDS = ["acquire", "relinquish", "record", "unsuspend", "remove-fence"]
NO_EVIDENCE = "HelmRelease read carries no metadata.resourceVersion and uid"


@pytest.mark.parametrize(("rv", "uid"), [
    pytest.param("", "uid-1", id="rv-empty"),
    pytest.param("100", "", id="uid-empty"),
    pytest.param(100, "uid-1", id="rv-a-number"),
    pytest.param("100", 7, id="uid-a-number"),
    pytest.param("", "", id="both-empty"),
])
@pytest.mark.parametrize("build", BUILDERS, ids=IDS)
def test_empty_or_odd_evidence_builds_no_write(build, rv, uid) -> None:
    release = hr(suspend=True, finalizers=[constants.FENCE])
    release["metadata"]["resourceVersion"] = rv
    release["metadata"]["uid"] = uid
    with pytest.raises(ValueError) as exc:
        build(release)
    assert str(exc.value) == NO_EVIDENCE


@pytest.mark.parametrize("metadata", [None, ["uid"], "uid-1"])
@pytest.mark.parametrize("build", BUILDERS, ids=IDS)
def test_a_read_without_metadata_builds_no_write(build, metadata) -> None:
    """No body, whichever way: the evidence error, or (removing the fence) no fence to
    remove, hence no patch."""
    release = {"spec": {"suspend": True}, "metadata": metadata}
    if build is BUILDERS[-1]:
        assert build(release) is None
        return
    with pytest.raises(ValueError) as exc:
        build(release)
    assert str(exc.value) == NO_EVIDENCE
