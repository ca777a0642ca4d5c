"""A protobuf DeleteOptions body (what client-go sends with a DELETE) read as its JSON fields: the
grace period a signed int64 (two's complement on the wire), dry run repeated, the rest as they are."""

from __future__ import annotations

from neuronfleet.sandbox.protobuf import MAGIC, decode_delete_options


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _envelope(options: bytes) -> bytes:
    """runtime.Unknown: its TypeMeta (1) and the raw DeleteOptions message (2), after k8s\\0."""
    type_meta = _field(1, b"v1") + _field(2, b"DeleteOptions")
    return MAGIC + _field(1, type_meta) + _field(2, options)


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
