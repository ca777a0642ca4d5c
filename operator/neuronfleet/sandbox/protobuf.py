"""Just enough of Kubernetes' protobuf encoding to accept what kubectl's typed commands send.

kubectl sends protobuf bodies (``application/vnd.kubernetes.protobuf``) from its typed generators:
``kubectl create namespace``, ``create configmap``, ``auth can-i``. Decoding every built-in kind
would need all of Kubernetes' generated schemas; this decodes the ``k8s\\0`` envelope
(``runtime.Unknown``), ``ObjectMeta`` (name, generateName, namespace, labels, annotations,
finalizers) and the bodies of Namespace, ConfigMap, Secret (Helm's release records) and the
access reviews. Other kinds raise
``ProtobufUnsupported`` (answered 415). It also encodes the one protobuf response kubectl needs:
the ``/openapi/v2`` document (gnostic's ``openapi_v2.Document``). Hand-written: the wire format is a few lines, and the
``protobuf`` package has no schema for these messages either.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

MAGIC = b"k8s\x00"


class ProtobufUnsupported(ValueError):
    """A protobuf body this server cannot decode."""


Fields = dict[int, list[Any]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufUnsupported("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def parse(data: bytes) -> Fields:
    """Wire format -> {field number: [values]} (varints as int, length-delimited as bytes)."""
    fields: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        value: Any
        if wire_type == 0:
            value, pos = _varint(data, pos)
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire_type == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire_type == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ProtobufUnsupported(f"unsupported wire type {wire_type}")
        fields.setdefault(number, []).append(value)
    return fields


def _string(fields: Fields, number: int) -> str:
    values = fields.get(number)
    return values[-1].decode() if values else ""


def _map(fields: Fields, number: int, decode_values: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for entry in fields.get(number, []):
        pair = parse(entry)
        value = pair.get(2, [b""])[-1]
        result[_string(pair, 1)] = value.decode() if decode_values else base64.b64encode(value).decode()
    return result


def _object_meta(data: bytes) -> dict[str, Any]:
    fields = parse(data)
    meta: dict[str, Any] = {}
    for number, name in ((1, "name"), (2, "generateName"), (3, "namespace")):
        if _string(fields, number):
            meta[name] = _string(fields, number)
    for number, name in ((11, "labels"), (12, "annotations")):
        if fields.get(number):
            meta[name] = _map(fields, number)
    if fields.get(14):
        meta["finalizers"] = [v.decode() for v in fields[14]]
    return meta


def _access_review_spec(data: bytes) -> dict[str, Any]:
    fields = parse(data)
    spec: dict[str, Any] = {}
    if fields.get(1):
        attributes = parse(fields[1][-1])
        names = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        spec["resourceAttributes"] = {
            n: _string(attributes, i) for i, n in enumerate(names, 1) if _string(attributes, i)
        }
    if fields.get(2):
        attributes = parse(fields[2][-1])
        spec["nonResourceAttributes"] = {"path": _string(attributes, 1), "verb": _string(attributes, 2)}
    return spec


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it encodes."""
    if not body.startswith(MAGIC):
        raise ProtobufUnsupported("not a Kubernetes protobuf envelope (missing the k8s\\0 prefix)")
    envelope = parse(body[len(MAGIC) :])
    type_meta = parse(envelope.get(1, [b""])[-1])
    api_version, kind = _string(type_meta, 1), _string(type_meta, 2)
    raw = parse(envelope.get(2, [b""])[-1])
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    obj["metadata"] = _object_meta(raw[1][-1]) if raw.get(1) else {}
    if (api_version, kind) == ("v1", "Namespace"):
        return obj
    if (api_version, kind) == ("v1", "ConfigMap"):
        if raw.get(2):
            obj["data"] = _map(raw, 2)
        if raw.get(3):
            obj["binaryData"] = _map(raw, 3, decode_values=False)
        return obj
    if (api_version, kind) == ("v1", "Secret"):
        if raw.get(2):
            obj["data"] = _map(raw, 2, decode_values=False)
        if raw.get(4):
            obj["stringData"] = _map(raw, 4)
        if raw.get(3):
            obj["type"] = _string(raw, 3)
        return obj
    if api_version == "authorization.k8s.io/v1" and kind in ("SelfSubjectAccessReview", "SubjectAccessReview"):
        obj["spec"] = _access_review_spec(raw[2][-1]) if raw.get(2) else {}
        return obj
    raise ProtobufUnsupported(f"{api_version} {kind}")


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """A protobuf ``DeleteOptions`` body (what client-go sends with DELETE) as JSON fields."""
    if not body.startswith(MAGIC):
        raise ProtobufUnsupported("not a Kubernetes protobuf envelope (missing the k8s\\0 prefix)")
    raw = parse(parse(body[len(MAGIC) :]).get(2, [b""])[-1])
    options: dict[str, Any] = {}
    if raw.get(1):
        grace = int(raw[1][-1])
        options["gracePeriodSeconds"] = grace - (1 << 64) if grace >= 1 << 63 else grace
    if raw.get(3):
        options["orphanDependents"] = bool(raw[3][-1])
    if raw.get(4):
        options["propagationPolicy"] = _string(raw, 4)
    if raw.get(5):
        options["dryRun"] = [v.decode() for v in raw[5]]
    return options


# ---- encoding: the OpenAPI v2 document kubectl asks for ------------------------------------------

#: What kube-openapi answers; kubectl asks for the older "...spec.v2@v1.0+protobuf", but Go's
#: media type parser refuses that one in a response.
OPENAPI_V2_MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _length_delimited(number, value.encode()) if value else b""


def encode_openapi_v2(document: dict[str, Any]) -> bytes:
    """A swagger 2.0 document (``openapi.swagger_document``: info and definitions carrying a
    description and vendor extensions) as gnostic's ``openapi_v2.Document`` message, which is what
    kubectl decodes from ``/openapi/v2``. Field numbers from gnostic's OpenAPIv2.proto."""
    info = document.get("info") or {}
    encoded = _text(1, str(document.get("swagger", "2.0")))  # Document.swagger
    encoded += _length_delimited(2, _text(1, str(info.get("title", ""))) + _text(2, str(info.get("version", ""))))
    named_schemas = b""
    for name, schema in (document.get("definitions") or {}).items():
        body = _text(4, str(schema.get("description", "")))  # Schema.description
        for key, value in schema.items():
            if key.startswith("x-"):
                any_value = _text(2, yaml.safe_dump(value, sort_keys=False))  # Any.yaml
                body += _length_delimited(31, _text(1, key) + _length_delimited(2, any_value))  # vendor_extension
        named_schemas += _length_delimited(1, _text(1, name) + _length_delimited(2, body))  # NamedSchema
    encoded += _length_delimited(9, named_schemas)  # Document.definitions
    return encoded
