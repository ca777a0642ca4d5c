"""Protobuf request bodies (what client-go sends when it may) read as the JSON they encode: a
DeleteOptions' grace period a signed int64 (two's complement on the wire), dry run repeated; an
access review's resource and non-resource attributes (``kubectl auth can-i``). And the one protobuf
response, ``/openapi/v2``, read back by the field numbers of gnostic's OpenAPIv2.proto."""

from __future__ import annotations

import pytest
import yaml

from neuronfleet.sandbox.protobuf import (
    MAGIC,
    ProtobufUnsupported,
    decode,
    decode_delete_options,
    encode_openapi_v2,
    parse,
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _envelope(message: bytes, api_version: bytes = b"v1", kind: bytes = b"DeleteOptions") -> bytes:
    """runtime.Unknown: its TypeMeta (1) and the raw message (2), after k8s\\0."""
    type_meta = _field(1, api_version) + _field(2, kind)
    return MAGIC + _field(1, type_meta) + _field(2, message)


def test_a_delete_options_body_reads_as_its_json_fields() -> None:
    options = _varint(1 << 3) + _varint(30) + _varint(3 << 3) + _varint(1)
    options += _field(4, b"Foreground") + _field(5, b"All")
    assert decode_delete_options(_envelope(options)) == {
        "gracePeriodSeconds": 30,
        "orphanDependents": True,
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
    }


def test_a_negative_grace_period_is_read_as_the_int64_it_encodes() -> None:
    # kube-apiserver refuses a negative grace period by its value: it must arrive as -1, not 2**64 - 1.
    options = _varint(1 << 3) + _varint((1 << 64) - 1)
    assert decode_delete_options(_envelope(options)) == {"gracePeriodSeconds": -1}


def test_an_access_review_reads_its_resource_and_non_resource_attributes() -> None:
    resource = _field(1, b"default") + _field(2, b"create") + _field(5, b"pods")
    non_resource = _field(1, b"/healthz") + _field(2, b"get")
    spec = _field(1, resource) + _field(2, non_resource)
    review = decode(_envelope(_field(2, spec), b"authorization.k8s.io/v1", b"SelfSubjectAccessReview"))
    assert review["spec"] == {
        "resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"},
        "nonResourceAttributes": {"path": "/healthz", "verb": "get"},
    }


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [(b"authorization.k8s.io/v1", b"SelfSubjectRulesReview"), (b"example.com/v1", b"SelfSubjectAccessReview")],
)
def test_a_kind_it_cannot_read_is_refused_not_misread(api_version: bytes, kind: bytes) -> None:
    # The API server answers 415 naming the kind; read as an access review, it would be misread.
    with pytest.raises(ProtobufUnsupported, match=kind.decode()):
        decode(_envelope(_field(2, _field(1, b"default")), api_version, kind))


def _entry(key: bytes, value: bytes) -> bytes:
    """A map<string, ...> entry: key 1, value 2."""
    return _field(1, key) + _field(2, value)


def test_a_secret_as_helm_writes_it_reads_with_its_whole_metadata() -> None:
    # ObjectMeta's numbers from k8s.io/apimachinery generated.proto: name 1, generateName 2,
    # namespace 3, labels 11, annotations 12, finalizers 14. Secret: data 2, type 3, stringData 4.
    meta = _field(1, b"sh.helm.release.v1.bert.v1") + _field(3, b"serving")
    meta += _field(11, _entry(b"owner", b"helm")) + _field(11, _entry(b"status", b"deployed"))
    meta += _field(12, _entry(b"meta.helm.sh/release-name", b"bert"))
    meta += _field(14, b"example.com/keep") + _field(14, b"example.com/audit")
    secret = _field(1, meta) + _field(2, _entry(b"release", b"\x1f\x8b")) + _field(3, b"helm.sh/release.v1")
    secret += _field(4, _entry(b"note", b"plain"))
    assert decode(_envelope(secret, b"v1", b"Secret")) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "sh.helm.release.v1.bert.v1",
            "namespace": "serving",
            "labels": {"owner": "helm", "status": "deployed"},
            "annotations": {"meta.helm.sh/release-name": "bert"},
            "finalizers": ["example.com/keep", "example.com/audit"],
        },
        "data": {"release": "H4s="},  # bytes, base64 as JSON carries them
        "type": "helm.sh/release.v1",
        "stringData": {"note": "plain"},
    }


def test_a_config_map_reads_its_text_and_binary_data() -> None:
    config_map = _field(1, _field(2, b"settings-")) + _field(2, _entry(b"mode", b"fast"))
    config_map += _field(3, _entry(b"blob", b"\x00\x01"))
    assert decode(_envelope(config_map, b"v1", b"ConfigMap")) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"generateName": "settings-"},
        "data": {"mode": "fast"},
        "binaryData": {"blob": "AAE="},
    }


def test_the_openapi_v2_document_carries_gnostics_field_numbers() -> None:
    gvk = [{"group": "apps", "kind": "Deployment", "version": "v1"}]
    document = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "definitions": {
            "io.k8s.api.apps.v1.Deployment": {"description": "A Deployment.", "x-kubernetes-group-version-kind": gvk}
        },
    }
    fields = parse(encode_openapi_v2(document))
    assert fields[1] == [b"2.0"]  # Document.swagger
    info = parse(fields[2][0])  # Document.info: Info.title 1, Info.version 2
    assert (info[1], info[2]) == ([b"Kubernetes"], [b"v1.34.0"])
    definitions = parse(fields[9][0])  # Document.definitions: Definitions.additional_properties 1
    (named,) = [parse(entry) for entry in definitions[1]]  # NamedSchema: name 1, value 2
    assert named[1] == [b"io.k8s.api.apps.v1.Deployment"]
    schema = parse(named[2][0])
    assert schema[4] == [b"A Deployment."]  # Schema.description
    (extension,) = [parse(entry) for entry in schema[31]]  # Schema.vendor_extension: NamedAny name 1, value 2
    assert extension[1] == [b"x-kubernetes-group-version-kind"]
    assert yaml.safe_load(parse(extension[2][0])[2][0]) == gvk  # Any.yaml
