"""The storage verdict on odd storage (issue 40: each test here kills mutants of
core/storage.py that the rest of the unit tier let survive).

* A refusal names the newest revision it looked at: `status` prints it, and
  `plan.storage_verdict` needs it to see that the revision we deleted is gone (awaiting
  helm-controller's retry) rather than skip the release.
* Helm's payload is strict base64: a character outside the alphabet is corruption, not
  noise to drop.
* A value of the wrong type (a number where Helm writes a string, a bool where it writes a
  version) never passes for a good one.
"""

from __future__ import annotations

import base64

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.plan import Verdict, storage_verdict
from kubectl_flux_plunger.core.storage import (
    PayloadError,
    Refusal,
    Revision,
    choose_revision,
    decode_payload,
    make_storage_secret,
    release_name,
    storage_namespace,
)

from .builders import hr

pytestmark = pytest.mark.unit


def secret(revision: int, status: str, **kw: object) -> dict:
    return make_storage_secret("demo", "default", revision, status, **kw)


@pytest.mark.parametrize(("storage", "refusal"), [
    pytest.param([secret(1, "superseded"), secret(2, "failed", extra={"info": {}})],
                 Refusal.CORRUPT, id="no-info-status"),
    pytest.param([secret(2, "failed", extra={"version": 3})],
                 Refusal.VERSION_MISMATCH, id="version-mismatch"),
    pytest.param([secret(2, "failed")], Refusal.HELM_HANDLES, id="failed"),
    pytest.param([secret(2, "draft")], Refusal.UNEXPECTED_STATUS, id="unexpected-status"),
    pytest.param([secret(2, "failed"), dict(secret(2, "failed"), metadata=dict(
        secret(2, "failed")["metadata"], name="sh.helm.release.v1.demo.v2-copy"))],
        Refusal.DUPLICATE, id="duplicate"),
])
def test_a_refusal_names_the_newest_revision(storage, refusal) -> None:
    choice = choose_revision(hr(), storage)
    assert not choice.ok and choice.refusal is refusal
    assert choice.revision is not None and choice.revision.number == 2


def test_after_our_recovery_the_superseded_revision_left_awaits_the_retry() -> None:
    """We deleted revision 3; revision 2 (superseded: helm-controller handles it) is now the
    newest.  The refusal's revision is what tells the verdict that it is below ours."""
    release = hr(annotations={constants.PROCESSED_ANNOTATION: "3"}, generation=3,
                 last_attempted_generation=2)
    verdict = storage_verdict(release, [secret(1, "superseded"), secret(2, "superseded")])
    assert verdict.verdict is Verdict.AWAITING_RETRY


def test_a_bool_version_is_not_revision_one() -> None:
    """JSON true is an int to Python (True == 1): it is still no version."""
    choice = choose_revision(hr(), [secret(1, "failed", extra={"version": True})])
    assert choice.refusal is Refusal.VERSION_MISMATCH and not choice.ok


def test_a_non_string_info_status_is_a_corrupt_payload() -> None:
    choice = choose_revision(hr(), [secret(1, "failed", extra={"info": {"status": 5}})])
    assert choice.refusal is Refusal.CORRUPT
    assert choice.reason.endswith("no info.status")


@pytest.mark.parametrize("where", ["outer", "inner"])
def test_a_character_outside_base64_is_corruption(where) -> None:
    body = secret(1, "failed")
    outer = body["data"]["release"]
    if where == "outer":
        garbled = outer[:8] + "*" + outer[8:]
    else:
        inner = base64.b64decode(outer).decode()
        garbled = base64.b64encode((inner[:8] + "*" + inner[8:]).encode()).decode()
    body["data"]["release"] = garbled
    with pytest.raises(PayloadError, match="not valid base64"):
        decode_payload(body)
    choice = choose_revision(hr(), [body])
    assert choice.refusal is Refusal.CORRUPT
    assert "not valid base64" in choice.reason  # the operator is told what is wrong


def test_revision_zero_is_older_than_revision_one() -> None:
    storage = [secret(0, "superseded"), secret(1, "uninstalling")]
    choice = choose_revision(hr(), storage)
    assert choice.ok and choice.revision is not None and choice.revision.number == 1


@pytest.mark.parametrize("odd", [7, ["x"], {"a": "b"}, True])
def test_names_of_the_wrong_type_are_ignored(odd) -> None:
    assert release_name(hr("podinfo", spec_extra={"releaseName": odd})) == "podinfo"
    assert release_name(hr("podinfo", spec_extra={"targetNamespace": odd})) == "podinfo"
    assert release_name(hr("podinfo", status_extra={"history": [{"name": odd}]})) == "podinfo"
    assert storage_namespace(hr(namespace="apps", spec_extra={"storageNamespace": odd},
                                status_extra={"storageNamespace": odd})) == "apps"


def test_a_release_without_name_or_namespace_names_nothing() -> None:
    assert release_name({"spec": {}}) == ""
    assert storage_namespace({"spec": {}}) == ""


def test_a_status_label_of_the_wrong_type_is_no_status() -> None:
    body = secret(1, "deployed")
    body["metadata"]["labels"]["status"] = 1
    revision = Revision.from_secret(body)
    assert revision is not None and revision.label_status is None
