"""The storage half of the live-stuck row (``plan.storage_verdict``): recover the chosen
revision, await helm-controller's retry after an earlier recovery (with or without storage
left), or skip with the reason — and the staleness guard for a release whose storage is gone
(``detect.awaiting_retry_without_storage``)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger import constants
from kubectl_flux_plunger.detect import awaiting_retry_without_storage
from kubectl_flux_plunger.plan import Verdict, storage_verdict
from kubectl_flux_plunger.storage import choose_revision, make_storage_secret

from .builders import hr

pytestmark = pytest.mark.unit


def processed(revision: int, *, attempted: bool) -> dict:
    """A release after a recovery that deleted ``revision``: our relinquish bumped the
    generation to 3; helm-controller attempted generation 3 (or not yet: 2)."""
    return hr(annotations={constants.PROCESSED_ANNOTATION: str(revision)}, generation=3,
              last_attempted_generation=3 if attempted else 2)


def secret(revision: int, status: str, **kw: object) -> dict:
    return make_storage_secret("demo", "default", revision, status, **kw)


def test_no_storage_after_our_recovery_awaits_helm_controller():
    release = processed(1, attempted=False)
    done, why = awaiting_retry_without_storage(release)
    assert done
    assert why == ("revision 1 was deleted by an earlier recovery (no storage is left) and "
                   "helm-controller has not retried since (lastAttemptedGeneration 2, "
                   "generation 3)")
    verdict = storage_verdict(release, [])
    assert (verdict.verdict, verdict.detail) == (Verdict.AWAITING_RETRY, why)
    assert verdict.choice.storage_found is False


def test_no_storage_once_helm_controller_retried_is_a_skip():
    release = processed(1, attempted=True)
    assert awaiting_retry_without_storage(release) == (False, "")
    verdict = storage_verdict(release, [])
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.detail.startswith("no Helm storage Secrets for release demo")


def test_no_storage_and_no_recovery_of_ours_is_a_skip():
    assert awaiting_retry_without_storage(hr()) == (False, "")
    assert storage_verdict(hr(), []).verdict is Verdict.SKIPPED


def test_the_revision_below_the_one_we_deleted_awaits_the_retry():
    verdict = storage_verdict(processed(3, attempted=False),
                              [secret(1, "superseded"), secret(2, "uninstalling")])
    assert verdict.verdict is Verdict.AWAITING_RETRY
    assert verdict.detail.startswith("revision 3 was deleted by an earlier recovery")
    assert verdict.choice.revision is not None and verdict.choice.revision.number == 2


def test_a_blocking_newest_revision_is_recovered():
    secrets = [secret(1, "superseded"), secret(2, "uninstalling")]
    verdict = storage_verdict(hr(), secrets)
    assert verdict.verdict is Verdict.RECOVER
    assert verdict.choice == choose_revision(hr(), secrets)
    assert verdict.detail == verdict.choice.reason


def test_storage_without_a_revision_number_is_a_skip_not_a_wait():
    odd = secret(1, "uninstalling")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vX"
    verdict = storage_verdict(processed(1, attempted=False), [odd])
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.detail.endswith("has no revision number")


def test_a_payload_without_info_status_is_corrupt():
    broken = secret(2, "uninstalling", extra={"info": {}})
    choice = choose_revision(hr(), [broken])
    assert not choice.ok
    assert choice.reason == "newest revision 2 has a corrupt payload: no info.status"
