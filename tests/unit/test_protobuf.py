"""kube/protobuf: the Lease renewal's answer as protobuf ``PartialObjectMetadata`` — a real
kube-apiserver answer decoded, every malformed payload refused with ``Malformed`` (never an
IndexError, never a half-read object), the transport decoding by Content-Type, and the
Lease update sending and returning what serve's elector expects."""
from __future__ import annotations

import base64
import json

import pytest

from kubectl_flux_plunger import kube as K
from kubectl_flux_plunger.kube import protobuf as P
from tests.unit.test_cover_kube import _Resp, _with_pool, kube, kubeconfig  # noqa: F401

pytestmark = pytest.mark.unit

# kube-apiserver v1.37.2's answer to a Lease PUT asking for METADATA_ACCEPT (2026-12-07)
REAL = base64.b64decode(
    "azhzAAonCg5tZXRhLms4cy5pby92MRIVUGFydGlhbE9iamVjdE1ldGFkYXRhEvUDCvIDCgJmcBIAGgdkZWZhdWx0Ig"
    "AqJDA5ODMxMDdmLTE5NGUtNDBjOC04NDI4LTVmOTUzOGMyMDEyMjIDMjEwOABCCAjCwdnYBhAAYiYKImZsdXgtcGx1"
    "bmdlci5jb3p5c3RhY2suaW8vc2VsZWN0b3ISAGItCilmbHV4LXBsdW5nZXIuY296eXN0YWNrLmlvL3dhdGNoLW5hbW"
    "VzcGFjZRIAigHPAgoUa3ViZWN0bC1mbHV4LXBsdW5nZXISBlVwZGF0ZRoWY29vcmRpbmF0aW9uLms4cy5pby92MSII"
    "CMLB2dgGEAAyCEZpZWxkc1YxOoACCv0BeyJmOm1ldGFkYXRhIjp7ImY6YW5ub3RhdGlvbnMiOnsiLiI6e30sImY6Zm"
    "x1eC1wbHVuZ2VyLmNvenlzdGFjay5pby9zZWxlY3RvciI6e30sImY6Zmx1eC1wbHVuZ2VyLmNvenlzdGFjay5pby93"
    "YXRjaC1uYW1lc3BhY2UiOnt9fX0sImY6c3BlYyI6eyJmOmFjcXVpcmVUaW1lIjp7fSwiZjpob2xkZXJJZGVudGl0eS"
    "I6e30sImY6bGVhc2VEdXJhdGlvblNlY29uZHMiOnt9LCJmOmxlYXNlVHJhbnNpdGlvbnMiOnt9LCJmOnJlbmV3VGlt"
    "ZSI6e319fUIAGgAiAA=="
)


# -- a writer for the tests' own payloads (the reader is the code under test) -------------

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: int | bytes | str, wire: int | None = None) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, int):
        return varint(number << 3 | (wire if wire is not None else 0)) + varint(value)
    return varint(number << 3 | (wire if wire is not None else 2)) + varint(len(value)) + value


def envelope(meta: bytes, api_version: str = "meta.k8s.io/v1",
             kind: str = "PartialObjectMetadata") -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return P.MAGIC + field(1, type_meta) + field(2, field(1, meta)) + field(3, "") + field(4, "")


def entry(key: str, value: str) -> bytes:
    return field(1, key) + field(2, value)


# -- the reader ------------------------------------------------------------------------

def test_a_real_apiserver_answer_decodes_to_what_the_json_answer_says():
    assert P.partial_object_metadata(REAL) == {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": {
            "name": "fp",
            "namespace": "default",
            "uid": "0983107f-194e-40c8-8428-5f9538c20122",
            "resourceVersion": "210",
            "annotations": {
                "flux-plunger.cozystack.io/selector": "",
                "flux-plunger.cozystack.io/watch-namespace": "",
            },
        },
    }


def test_labels_annotations_and_skipped_fields_of_every_wire_type():
    meta = (
        field(1, "lease") + field(2, "gen-") + field(3, "ns") + field(4, "/self")
        + field(5, "u-1") + field(6, "42") + field(7, 3)                 # generation: a varint
        + field(8, field(1, 1_700_000_000))                              # creationTimestamp
        + varint(10 << 3 | 1) + b"\x00" * 8                              # fixed64
        + varint(15 << 3 | 5) + b"\x00" * 4                              # fixed32
        + field(11, entry("a", "1")) + field(11, entry("b", "2"))
        + field(12, entry("note", "x")) + field(14, "finalizer")
        + field(17, field(1, "manager"))                                 # managedFields
        + field(99, 7)                                                   # a field from later
    )
    assert P.partial_object_metadata(envelope(meta))["metadata"] == {
        "name": "lease", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
        "labels": {"a": "1", "b": "2"}, "annotations": {"note": "x"}, "finalizers": ["finalizer"],
    }


def test_finalizers_are_read_in_order():
    meta = field(1, "l") + field(14, "a/one") + field(14, "b/two")
    assert P.partial_object_metadata(envelope(meta))["metadata"] == {
        "name": "l", "finalizers": ["a/one", "b/two"]}


def test_a_map_entry_without_a_value_is_an_empty_string_and_empty_metadata_is_empty():
    meta = (field(12, field(1, "only-key")) + field(12, field(2, "only-value"))
            + field(12, field(1, "k") + field(3, "a later field") + field(2, "v")))
    assert P.partial_object_metadata(envelope(meta))["metadata"] == {
        "annotations": {"only-key": "", "": "only-value", "k": "v"}}
    assert P.partial_object_metadata(envelope(b""))["metadata"] == {}


def test_a_long_varint_decodes():
    assert P.object_meta(field(7, 2**63 - 1) + field(6, "9")) == {"resourceVersion": "9"}
    assert len(varint(2**64 - 1)) == 10                          # a negative int64's size
    assert list(P.fields(field(7, 2**64 - 1))) == [(7, 2**64 - 1)]
    assert list(P.fields(field(300, 1))) == [(300, 1)]            # a two-byte key


NOT_PARTIAL = "not a meta.k8s.io/v1 PartialObjectMetadata"
TYPE_META = field(1, field(1, "meta.k8s.io/v1") + field(2, "PartialObjectMetadata"))


@pytest.mark.parametrize(("payload", "why"), [
    (REAL[4:], "no k8s protobuf envelope"),
    (b"k8s\x01" + REAL[4:], "no k8s protobuf envelope"),
    (envelope(b"", "coordination.k8s.io/v1", "Lease"), f"a coordination.k8s.io/v1 Lease, {NOT_PARTIAL}"),
    (envelope(b"", "meta.k8s.io/v1", "Table"), f"a meta.k8s.io/v1 Table, {NOT_PARTIAL}"),
    (envelope(b"", "meta.k8s.io/v2", "PartialObjectMetadata"),
     f"a meta.k8s.io/v2 PartialObjectMetadata, {NOT_PARTIAL}"),
    (P.MAGIC + field(1, field(2, "PartialObjectMetadata")), f"a  PartialObjectMetadata, {NOT_PARTIAL}"),
    (P.MAGIC + field(1, field(1, "meta.k8s.io/v1")), f"a meta.k8s.io/v1 , {NOT_PARTIAL}"),
    (P.MAGIC + field(2, field(1, b"")), "no typeMeta"),
    (P.MAGIC + field(1, 5) + field(2, field(1, b"")), "no typeMeta"),
    (P.MAGIC + TYPE_META, "no object"),
    (P.MAGIC + TYPE_META + field(2, field(2, b"")), "no metadata"),
    (P.MAGIC + field(1, field(1, 5) + field(2, "PartialObjectMetadata")),
     "a string field is not length-delimited"),
    (envelope(field(6, 210)), "a string field is not length-delimited"),
    (envelope(field(12, 5)), "a map entry is not length-delimited"),
    (envelope(varint(6 << 3 | 3)), "wire type 3 of field 6"),
    (envelope(varint(6 << 3 | 4)), "wire type 4 of field 6"),
    (envelope(varint(7 << 3) + b"\xff" * 10 + b"\x01"), "a varint longer than 10 bytes"),
    (envelope(field(6, "12")[:-1]), "field 6 runs past the end"),
    (envelope(varint(7 << 3) + b"\xff"), "a varint runs past the end"),
    (envelope(field(13, field(1, "v1"))), "metadata.ownerReferences, which this reader does not decode"),
    (P.MAGIC + TYPE_META + field(2, field(1, b"")) + field(3, "gzip"), "a content encoding (b'gzip')"),
])
def test_what_is_not_a_partial_object_metadata_is_refused(payload, why):
    with pytest.raises(P.Malformed) as err:
        P.partial_object_metadata(payload)
    assert str(err.value) == why


def test_every_truncation_of_the_real_answer_is_refused_never_half_read():
    whole = P.partial_object_metadata(REAL)
    trailer = field(3, "") + field(4, "")       # contentEncoding and contentType, both empty
    assert REAL.endswith(trailer)
    complete = {len(REAL) - len(trailer), len(REAL) - len(field(4, ""))}  # between fields
    for end in range(len(REAL)):
        if end in complete:
            assert P.partial_object_metadata(REAL[:end]) == whole
            continue
        with pytest.raises(P.Malformed):
            P.partial_object_metadata(REAL[:end])


def test_a_varint_cut_short_and_a_fixed_field_past_the_end():
    with pytest.raises(P.Malformed, match="a varint runs past the end"):
        list(P.fields(b"\x08\x80"))
    with pytest.raises(P.Malformed, match="field 1 runs past the end"):
        list(P.fields(varint(1 << 3 | 1) + b"\x00" * 7))
    with pytest.raises(P.Malformed, match="field 1 runs past the end"):
        list(P.fields(varint(1 << 3 | 5) + b"\x00" * 3))
    assert list(P.fields(varint(1 << 3 | 5) + b"\x01\x00\x00\x00")) == [(1, b"\x01\x00\x00\x00")]
    assert list(P.fields(varint(1 << 3 | 1) + b"\x00" * 8)) == [(1, b"\x00" * 8)]


# -- the transport and the Lease update --------------------------------------------------

def test_the_transport_decodes_a_protobuf_answer_by_its_content_type(kube):  # noqa: F811
    pb = {"Content-Type": f"{P.PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}
    bare = {"Content-Type": P.PROTOBUF}          # what kube-apiserver itself sends
    _with_pool(kube, _Resp(200, REAL, bare), _Resp(200, REAL[:40], pb),
               _Resp(200, b"\xff\xfe", pb))
    req = K.transport.Request("UPDATE", "PUT", "/l", accept=P.METADATA_ACCEPT)
    assert kube.send(req)["metadata"]["resourceVersion"] == "210"
    with pytest.raises(K.KubeError) as err:
        kube.send(req)
    assert err.value.reason == "BadResponse"
    assert str(err.value) == (
        "the API at https://127.0.0.1:1 answered PUT /l with protobuf flux-plunger cannot "
        "read (field 1 runs past the end)")
    with pytest.raises(K.KubeError, match="protobuf flux-plunger cannot read"):
        kube.send(req)


def test_a_lease_update_asks_for_metadata_sends_no_managed_fields_and_returns_the_lease(kube):  # noqa: F811
    pb = {"Content-Type": f"{P.PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}
    as_json = json.dumps({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                          "metadata": {"name": "fp", "resourceVersion": "211",
                                       "managedFields": [{"manager": "m"}]}}).encode()
    whole = json.dumps({"kind": "Lease", "metadata": {"name": "fp", "resourceVersion": "212",
                                                      "managedFields": [{"manager": "m"}]},
                        "spec": {"holderIdentity": "other"}}).encode()
    pool = _with_pool(kube, _Resp(200, REAL, pb), _Resp(200, as_json), _Resp(200, whole))
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "fp", "namespace": "default", "resourceVersion": "209",
                         "creationTimestamp": "2026-12-07T07:00:00Z",
                         "managedFields": [{"manager": "kubectl-flux-plunger"}]},
            "spec": {"holderIdentity": "me", "renewTime": "2026-12-07T07:00:05.000000Z"}}
    written = kube.update_lease("default", "fp", body)
    method, url, kw = pool.calls[0]
    assert (method, url.split("?")[0]) == (
        "PUT", "https://127.0.0.1:1/apis/coordination.k8s.io/v1/namespaces/default/leases/fp")
    assert kw["headers"]["Accept"] == P.METADATA_ACCEPT
    assert P.METADATA_ACCEPT.startswith(P.PROTOBUF + ";as=PartialObjectMetadata")
    sent = json.loads(kw["body"])
    assert "managedFields" not in sent["metadata"] and sent["spec"] == body["spec"]
    assert sent["metadata"]["resourceVersion"] == "209"
    assert written == {**body, "metadata": {
        "name": "fp", "namespace": "default", "resourceVersion": "210",
        "creationTimestamp": "2026-12-07T07:00:00Z",
        "uid": "0983107f-194e-40c8-8428-5f9538c20122",
        "annotations": {"flux-plunger.cozystack.io/selector": "",
                        "flux-plunger.cozystack.io/watch-namespace": ""}}}
    assert body["metadata"]["managedFields"]                     # the caller's copy untouched
    # a JSON PartialObjectMetadata answer (no protobuf on the way): its managedFields left out
    assert kube.update_lease("default", "fp", written)["metadata"] == {
        **written["metadata"], "resourceVersion": "211"}
    # a server that answers with the whole Lease: taken as it is
    assert kube.update_lease("default", "fp", written)["spec"] == {"holderIdentity": "other"}


# -- an answer that cannot be read: the write landed, JSON from then on -----------------

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases/fp"
BODY = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "fp", "namespace": "default", "resourceVersion": "209"},
        "spec": {"holderIdentity": "me", "renewTime": "2026-12-07T07:00:05.000000Z"}}


def _stored(spec: dict, rv: str = "210") -> bytes:
    return json.dumps({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                       "metadata": {"name": "fp", "namespace": "default", "resourceVersion": rv},
                       "spec": spec}).encode()


def test_an_unreadable_answer_is_checked_by_a_read_and_later_renewals_ask_for_json(kube):  # noqa: F811
    pb = {"Content-Type": P.PROTOBUF}
    pool = _with_pool(kube, _Resp(200, REAL[:40], pb), _Resp(200, _stored(BODY["spec"])),
                      _Resp(200, _stored(BODY["spec"], "211")))
    written = kube.update_lease("default", "fp", BODY)
    assert written["metadata"]["resourceVersion"] == "210" and written["spec"] == BODY["spec"]
    get = pool.calls[1]
    assert (get[0], get[1].split("?")[0].removeprefix("https://127.0.0.1:1")) == ("GET", LEASE_PATH)
    kube.update_lease("default", "fp", written)
    assert pool.calls[2][2]["headers"]["Accept"] == K.JSON       # no protobuf asked again


def test_an_unreadable_answer_whose_lease_does_not_hold_the_write_is_a_failed_renewal(kube):  # noqa: F811
    pb = {"Content-Type": P.PROTOBUF}
    other = {**BODY["spec"], "holderIdentity": "other"}
    _with_pool(kube, _Resp(200, REAL[:40], pb), _Resp(200, _stored(other)),
               _Resp(200, REAL[:40], {"Content-Type": K.JSON}))
    with pytest.raises(K.KubeError, match="protobuf flux-plunger cannot read"):
        kube.update_lease("default", "fp", BODY)
    # asking for JSON already, an unreadable answer is the transport's error as it is
    with pytest.raises(K.KubeError, match="with non-JSON"):
        kube.update_lease("default", "fp", BODY)


def test_an_unreadable_answer_of_a_lease_gone_and_other_errors_are_raised(kube):  # noqa: F811
    pb = {"Content-Type": P.PROTOBUF}
    missing = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound"}).encode()
    conflict = json.dumps({"kind": "Status", "code": 409, "reason": "Conflict",
                           "message": "modified"}).encode()
    _with_pool(kube, _Resp(200, REAL[:40], pb), _Resp(404, missing), _Resp(409, conflict))
    with pytest.raises(K.KubeError, match="protobuf flux-plunger cannot read"):
        kube.update_lease("default", "fp", BODY)
    with pytest.raises(K.KubeError) as err:
        kube.update_lease("default", "fp", BODY)
    assert err.value.conflict
