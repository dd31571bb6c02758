"""Helm storage: release naming, Secret parsing, payload coding and choosing the revision."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.storage import Choice, PayloadError, Revision, Refusal, choose_revision, decode_payload, encode_payload, label_selector, make_storage_secret, release_name, storage_namespace

from .builders import hr

pytestmark = pytest.mark.unit


def secret(revision: int, status: str, *, release: str = "demo", namespace: str = "default",
           **kwargs: object) -> dict:
    """A storage Secret for ``release`` at ``revision`` with ``status`` in label and payload."""
    return make_storage_secret(release, namespace, revision, status, **kwargs)


def with_data(body: dict, value: str) -> dict:
    """The Secret with ``data.release`` replaced by ``value``."""
    body["data"] = {"release": value}
    return body


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def expected_short(name: str) -> str:
    """SPEC §4's shortening formula, computed independently of the code under test."""
    return name[:40] + "-" + hashlib.sha256(name.encode()).hexdigest()[:12]


# --- release name and namespace -------------------------------------------------------------


def test_release_name_defaults_to_metadata_name() -> None:
    assert release_name(hr("podinfo")) == "podinfo"


def test_release_name_prefixes_target_namespace() -> None:
    assert release_name(hr("podinfo", spec_extra={"targetNamespace": "apps"})) == "apps-podinfo"


def test_release_name_prefers_spec_release_name() -> None:
    release = hr("podinfo", spec_extra={"targetNamespace": "apps", "releaseName": "web"})
    assert release_name(release) == "web"


def test_release_name_prefers_recorded_history() -> None:
    release = hr(
        "podinfo",
        spec_extra={"releaseName": "web"},
        status_extra={"history": [{"name": "recorded", "namespace": "apps", "version": 4},
                                  {"name": "older", "version": 3}]},
    )
    assert release_name(release) == "recorded"


@pytest.mark.parametrize(
    "history",
    [pytest.param([], id="empty"), pytest.param(["x"], id="not-dict"),
     pytest.param([{"version": 1}], id="no-name"), pytest.param("junk", id="not-list")],
)
def test_release_name_falls_back_when_history_unusable(history: object) -> None:
    assert release_name(hr("podinfo", status_extra={"history": history})) == "podinfo"


def test_release_name_of_53_chars_is_kept() -> None:
    name = "a" * 53
    assert release_name(hr(spec_extra={"releaseName": name})) == name


def test_release_name_of_54_chars_is_shortened_with_hash_of_full_name() -> None:
    name = "b" * 30 + "-" + "c" * 23
    assert len(name) == 54
    short = release_name(hr(spec_extra={"releaseName": name}))
    assert short == expected_short(name)
    assert len(short) == 53
    assert short.startswith(name[:40] + "-")


def test_long_target_namespace_combination_is_shortened() -> None:
    target, name = "tenant-with-a-rather-long-namespace", "monitoring-stack-release"
    full = f"{target}-{name}"
    assert len(full) > 53
    assert release_name(hr(name, spec_extra={"targetNamespace": target})) == expected_short(full)


@pytest.mark.parametrize(
    ("spec_extra", "status_extra", "expected"),
    [
        pytest.param({}, {}, "default", id="own-namespace"),
        pytest.param({"targetNamespace": "apps"}, {}, "default", id="target-is-not-storage"),
        pytest.param({"storageNamespace": "store"}, {}, "store", id="spec"),
        pytest.param({"storageNamespace": "store"}, {"storageNamespace": "recorded"}, "recorded",
                     id="status-wins"),
    ],
)
def test_storage_namespace(spec_extra: dict, status_extra: dict, expected: str) -> None:
    assert storage_namespace(hr(spec_extra=spec_extra, status_extra=status_extra)) == expected


def test_label_selector() -> None:
    assert label_selector("apps-web") == "owner=helm,name=apps-web"


# --- Revision.from_secret -------------------------------------------------------------------


def test_revision_from_secret_reads_metadata() -> None:
    body = secret(7, "uninstalling")
    body["metadata"].update(uid="s-uid", resourceVersion="42")
    assert Revision.from_secret(body) == Revision(
        name="sh.helm.release.v1.demo.v7", namespace="default", uid="s-uid",
        resource_version="42", number=7, label_status="uninstalling",
    )


def test_revision_from_secret_ignores_other_types() -> None:
    body = secret(1, "deployed")
    body["type"] = "Opaque"
    assert Revision.from_secret(body) is None


def test_revision_number_prefers_version_label() -> None:
    body = secret(3, "failed")
    body["metadata"]["labels"]["version"] = "12"
    assert Revision.from_secret(body).number == 12


@pytest.mark.parametrize("label", [None, "", "x", "-1", "3.0"])
def test_revision_number_falls_back_to_name_suffix(label: str | None) -> None:
    body = secret(9, "failed")
    body["metadata"]["labels"].pop("version")
    if label is not None:
        body["metadata"]["labels"]["version"] = label
    assert Revision.from_secret(body).number == 9


@pytest.mark.parametrize(
    "name",
    ["sh.helm.release.v1.demo.vX", "sh.helm.release.v1.demo", "sh.helm.release.v1",
     "sh.helm.release.v1.demo.v", "sh.helm.release.v1.demo.v1x", "", "demo.v3"],
)
def test_unparsable_secret_names_give_no_number(name: str) -> None:
    body = secret(1, "failed")
    body["metadata"]["labels"].pop("version")
    body["metadata"]["name"] = name
    revision = Revision.from_secret(body)
    assert revision is not None
    assert revision.number is None


def test_dotted_release_name_parses_from_the_last_segment() -> None:
    body = secret(10, "failed", release="my.dotted.release")
    body["metadata"]["labels"].pop("version")
    assert Revision.from_secret(body).number == 10


def test_revision_from_secret_tolerates_missing_metadata() -> None:
    revision = Revision.from_secret({"type": constants.HELM_SECRET_TYPE})
    assert revision == Revision("", "", "", "", None, None)


# --- payload --------------------------------------------------------------------------------


def test_payload_round_trip_is_double_base64_gzip() -> None:
    release = {"name": "demo", "version": 2, "info": {"status": "unknown"}}
    value = encode_payload(release)
    helm_blob = base64.b64decode(value)
    assert gzip.decompress(base64.b64decode(helm_blob)) == json.dumps(release).encode()
    assert decode_payload({"data": {"release": value}}) == release


def test_payload_without_gzip_is_read() -> None:
    release = {"name": "demo", "version": 1, "info": {"status": "uninstalling"}}
    value = b64(b64(json.dumps(release).encode()).encode())
    assert decode_payload({"data": {"release": value}}) == release


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        pytest.param(None, "missing", id="no-data"),
        pytest.param({}, "missing", id="no-release"),
        pytest.param({"release": 5}, "missing", id="not-a-string"),
        pytest.param({"release": "!!!not base64!!!"}, "data.release is not valid base64",
                     id="outer-not-base64"),
        pytest.param({"release": b64(b"%%% not base64 %%%")}, "Helm release blob",
                     id="inner-not-base64"),
        pytest.param({"release": b64(b64(b"\x1f\x8b\x08\x00garbage").encode())}, "gzip",
                     id="corrupt-gzip"),
        pytest.param({"release": b64(b64(b"{not json").encode())}, "not JSON", id="not-json"),
        pytest.param({"release": b64(b64(b"\xff\xfe\x00").encode())}, "not UTF-8 text",
                     id="not-utf8"),
        pytest.param({"release": b64(b64(b"[1, 2]").encode())}, "not an object", id="json-array"),
    ],
)
def test_corrupt_payload_raises_one_line_payload_error(data: object, fragment: str) -> None:
    body = {"type": constants.HELM_SECRET_TYPE}
    if data is not None:
        body["data"] = data
    with pytest.raises(PayloadError) as caught:
        decode_payload(body)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_make_storage_secret_is_a_realistic_helm_secret() -> None:
    body = make_storage_secret("web", "apps", 3, "uninstalling", chart_name="podinfo",
                               chart_version="6.5.0", extra={"manifest": "---"})
    assert body["type"] == "helm.sh/release.v1"
    assert body["metadata"]["name"] == "sh.helm.release.v1.web.v3"
    assert body["metadata"]["namespace"] == "apps"
    assert body["metadata"]["labels"] == {
        "owner": "helm", "name": "web", "status": "uninstalling", "version": "3"}
    assert decode_payload(body) == {
        "name": "web",
        "namespace": "apps",
        "version": 3,
        "info": {"status": "uninstalling",
                 "description": "Deletion in progress (or silently failed)"},
        "chart": {"metadata": {"apiVersion": "v2", "name": "podinfo", "version": "6.5.0"}},
        "manifest": "---",
        "config": {},
    }


# --- choose_revision ------------------------------------------------------------------------


@pytest.mark.parametrize("status", sorted(constants.BLOCKING_STATUSES))
def test_blocking_newest_revision_is_chosen(status: str) -> None:
    choice = choose_revision(hr(), [secret(1, "superseded"), secret(2, "failed"),
                                    secret(3, status)])
    assert choice.ok is True
    assert choice.revision.name == "sh.helm.release.v1.demo.v3"
    assert choice.revision.number == 3
    assert choice.helm_status == status
    assert choice.reason == f"newest revision 3 has status {status} and no revision is deployed"


def test_no_storage_is_reported_with_release_and_namespace() -> None:
    release = hr("web", spec_extra={"storageNamespace": "store"})
    assert choose_revision(release, []) == Choice(
        None, None, False, "no Helm storage Secrets for release web in namespace store",
        storage_found=False, refusal=Refusal.NO_STORAGE)


def test_other_releases_and_types_are_not_storage() -> None:
    other = secret(5, "uninstalling", release="other")
    opaque = secret(6, "uninstalling")
    opaque["type"] = "Opaque"
    choice = choose_revision(hr(), [other, opaque, "junk"])
    assert choice.ok is False
    assert choice.reason.startswith("no Helm storage Secrets for release demo")


def test_release_name_from_target_namespace_selects_storage() -> None:
    release = hr("web", spec_extra={"targetNamespace": "apps"})
    choice = choose_revision(release, [secret(1, "uninstalling", release="apps-web"),
                                       secret(2, "uninstalling", release="web")])
    assert choice.ok is True
    assert choice.revision.name == "sh.helm.release.v1.apps-web.v1"


def test_ordering_is_numeric_v10_above_v9() -> None:
    older, newer = secret(9, "superseded"), secret(10, "uninstalling")
    for body in (older, newer):
        body["metadata"]["labels"].pop("version")
    choice = choose_revision(hr(), [newer, older])
    assert choice.ok is True
    assert choice.revision.number == 10


def test_unnumbered_secrets_are_ignored_for_ordering() -> None:
    odd = secret(99, "uninstalling")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vX"
    choice = choose_revision(hr(), [odd, secret(2, "uninstalling")])
    assert choice.ok is True
    assert choice.revision.number == 2


def test_only_unnumbered_secrets_is_not_ok() -> None:
    odd = secret(1, "uninstalling")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vX"
    choice = choose_revision(hr(), [odd])
    assert choice == Choice(
        None, None, False, "storage Secret sh.helm.release.v1.demo.vX has no revision number",
        refusal=Refusal.UNNUMBERED)


def test_older_deployed_revision_blocks() -> None:
    choice = choose_revision(hr(), [secret(2, "deployed"), secret(3, "uninstalling")])
    assert choice.ok is False
    assert choice.reason == "revision 2 is deployed"
    assert choice.revision.number == 3
    assert choice.helm_status == "uninstalling"


def test_unnumbered_deployed_secret_blocks() -> None:
    odd = secret(1, "deployed")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo"
    choice = choose_revision(hr(), [odd, secret(3, "uninstalling")])
    assert choice.ok is False
    assert choice.reason == "storage Secret sh.helm.release.v1.demo is deployed"


def test_newest_deployed_by_label_blocks() -> None:
    newest = secret(3, "uninstalling")
    newest["metadata"]["labels"]["status"] = "deployed"
    choice = choose_revision(hr(), [secret(2, "deployed"), newest])
    assert choice.ok is False
    assert choice.reason == "newest revision 3 is deployed"


def test_newest_deployed_by_payload_blocks() -> None:
    newest = secret(3, "deployed")
    newest["metadata"]["labels"]["status"] = "uninstalling"
    choice = choose_revision(hr(), [newest])
    assert choice == Choice(Revision.from_secret(newest), "deployed", False,
                            "newest revision 3 is deployed", refusal=Refusal.DEPLOYED)


@pytest.mark.parametrize(
    ("status", "why"),
    [
        ("failed", "helm-controller upgrades from it"),
        ("superseded", "helm-controller upgrades from it"),
        ("pending-upgrade", "helm-controller unlocks it itself"),
        ("bogus", "not a status that causes 'has no deployed releases'"),
    ],
)
def test_non_blocking_newest_status_is_left(status: str, why: str) -> None:
    choice = choose_revision(hr(), [secret(2, "superseded"), secret(3, status)])
    assert choice.ok is False
    assert choice.helm_status == status
    assert choice.reason == f"newest revision 3 has status {status} ({why})"


def test_undecodable_newest_payload_is_reported_not_chosen() -> None:
    newest = with_data(secret(3, "uninstalling"), b64(b64(b"{broken").encode()))
    choice = choose_revision(hr(), [secret(2, "failed"), newest])
    assert choice.ok is False
    assert choice.revision.number == 3
    assert choice.helm_status is None
    assert choice.reason.startswith("newest revision 3 has a corrupt payload: ")
    assert "\n" not in choice.reason


def test_payload_version_disagreeing_with_number_is_not_ok() -> None:
    newest = secret(3, "uninstalling", extra={"version": 4})
    choice = choose_revision(hr(), [newest])
    assert choice.ok is False
    assert choice.reason == "newest revision 3 payload records version 4"
    assert choice.helm_status == "uninstalling"


def test_payload_without_version_is_not_ok() -> None:
    newest = with_data(secret(3, "uninstalling"),
                       encode_payload({"name": "demo", "info": {"status": "uninstalling"}}))
    choice = choose_revision(hr(), [newest])
    assert choice.ok is False
    assert choice.reason == "newest revision 3 payload records version None"


def test_two_secrets_with_the_newest_number_are_not_ok() -> None:
    twin = secret(3, "uninstalling")
    twin["metadata"]["name"] = "sh.helm.release.v1.demo.v3-copy"
    choice = choose_revision(hr(), [secret(3, "uninstalling"), twin])
    assert choice.ok is False
    assert choice.reason == ("revision 3 is stored in more than one Secret "
                             "(sh.helm.release.v1.demo.v3, sh.helm.release.v1.demo.v3-copy)")
