"""Just enough of Kubernetes' protobuf encoding to read a ``PartialObjectMetadata``.

serve renews its Lease every ``--retry-period`` for as long as it runs: the answer to that
PUT is most of what the apiserver sends serve after start-up.  Asked for as
``PartialObjectMetadata`` in protobuf (the Accept header :data:`METADATA_ACCEPT`), it is the
object's metadata only, about half the bytes of the whole Lease as JSON (docs/BENCHMARKS.md,
"the apiserver's cost per hour").  The Accept header offers JSON as well, so a server (or a
proxy) that will not answer in protobuf answers in JSON, which the transport decodes as
always.

The wire format (k8s.io/apimachinery ``runtime/serializer/protobuf``): the 4 bytes ``k8s\\0``,
then a ``runtime.Unknown`` — ``typeMeta`` (1: apiVersion 1, kind 2), ``raw`` (2: the object),
``contentEncoding`` (3: empty) — whose ``raw`` is a ``PartialObjectMetadata`` whose field 1 is
the ``ObjectMeta``.  The ObjectMeta fields a PUT of the object carries are decoded (name,
namespace, uid, resourceVersion, labels, annotations, finalizers) and ownerReferences refused;
the rest (server-set: generation, timestamps, managedFields) are skipped by their wire type,
as protobuf readers do."""

from __future__ import annotations

from collections.abc import Iterator

from ..core.objects import Obj

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
_AS_METADATA = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# protobuf first, JSON as the fallback (both the metadata only), then the whole object
METADATA_ACCEPT = f"{PROTOBUF}{_AS_METADATA}, application/json{_AS_METADATA}, application/json"

# ObjectMeta's field numbers (k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto)
_STRINGS = {1: "name", 3: "namespace", 5: "uid", 6: "resourceVersion"}
_MAPS = {11: "labels", 12: "annotations"}
_FINALIZERS = 14
# what a PUT of the object would carry and this reader cannot: an answer holding it is
# refused (the caller then reads the object as JSON), so a write never drops it unseen
_UNREAD = {13: "ownerReferences"}
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class Malformed(ValueError):
    """Not a ``PartialObjectMetadata`` in Kubernetes' protobuf encoding."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise Malformed("a varint runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise Malformed("a varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for a varint, bytes for the rest."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(data, pos)
            yield number, value
            continue
        if wire == _BYTES:
            size, pos = _varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:
            raise Malformed(f"wire type {wire} of field {number}")
        end = pos + size
        if end > len(data):
            raise Malformed(f"field {number} runs past the end")
        yield number, data[pos:end]
        pos = end


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise Malformed("a string field is not length-delimited")
    return value.decode("utf-8")


def _entry(value: int | bytes) -> tuple[str, str]:
    """One entry of a map<string, string> (key 1, value 2)."""
    if not isinstance(value, bytes):
        raise Malformed("a map entry is not length-delimited")
    key = text = ""
    for number, item in fields(value):
        if number == 1:
            key = _text(item)
        elif number == 2:
            text = _text(item)
    return key, text


def object_meta(data: bytes) -> Obj:
    """The ObjectMeta fields flux-plunger reads, from an encoded ``ObjectMeta``."""
    meta: Obj = {}
    for number, value in fields(data):
        if number in _STRINGS:
            meta[_STRINGS[number]] = _text(value)
        elif number in _MAPS:
            key, text = _entry(value)
            meta.setdefault(_MAPS[number], {})[key] = text
        elif number == _FINALIZERS:
            meta.setdefault("finalizers", []).append(_text(value))
        elif number in _UNREAD:
            raise Malformed(f"metadata.{_UNREAD[number]}, which this reader does not decode")
    return meta


def _message(read: dict[int, int | bytes], number: int, what: str) -> bytes:
    """Field ``number`` of a message's fields as read (the last one, as protobuf merges),
    which must be length-delimited."""
    value = read.get(number)
    if not isinstance(value, bytes):
        raise Malformed(f"no {what}")
    return value


def partial_object_metadata(payload: bytes) -> Obj:
    """A ``PartialObjectMetadata`` answer as the JSON answer would decode (the ObjectMeta
    fields of :func:`object_meta`).  Raises :class:`Malformed` for anything else."""
    if not payload.startswith(MAGIC):
        raise Malformed("no k8s protobuf envelope")
    envelope = dict(fields(payload[len(MAGIC) :]))  # the runtime.Unknown, read once
    names = dict(fields(_message(envelope, 1, "typeMeta")))
    api_version, kind = _text(names.get(1, b"")), _text(names.get(2, b""))
    if (api_version, kind) != ("meta.k8s.io/v1", "PartialObjectMetadata"):
        raise Malformed(f"a {api_version} {kind}, not a meta.k8s.io/v1 PartialObjectMetadata")
    if envelope.get(3):
        raise Malformed(f"a content encoding ({envelope[3]!r})")
    raw = dict(fields(_message(envelope, 2, "object")))
    meta = object_meta(_message(raw, 1, "metadata"))
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}
