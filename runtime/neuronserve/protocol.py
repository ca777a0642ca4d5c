"""KServe v2 (Open Inference Protocol) JSON: request validation and response shapes.

Pure data handling (numpy only), so every rule about what the server accepts sits in one place and
each refusal carries the reason the client sees. The served models take 2-D [batch, sequence]
integer inputs; a model artifact that ships a tokenizer also accepts a BYTES tensor named ``text``
(strings are tokenized, truncated to the largest compiled sequence bucket).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from neuronserve.manifest import Manifest

TEXT_INPUT = "text"
ACCEPTED_INT_DATATYPES = ("INT64", "INT32")

# A tokenizer turns strings into (input_ids rows, attention_mask rows), each [n, seq] int64.
Tokenize = Callable[[Sequence[str], int], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]


class BadRequest(Exception):
    """The request cannot be served as sent; ``status`` is the HTTP code, the message the reason."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InferRequest:
    """A validated request: one [rows, seq] int64 array per model input, in signature order."""

    id: str | None
    arrays: list[npt.NDArray[np.int64]]

    @property
    def rows(self) -> int:
        return int(self.arrays[0].shape[0])

    @property
    def sequence(self) -> int:
        return int(self.arrays[0].shape[1])


def _fail(message: str) -> BadRequest:
    return BadRequest(message)


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise _fail("malformed JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise _fail("the request body must be a JSON object with an 'inputs' list")
    return doc


def _shape(tensor: dict[str, Any], name: str) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise _fail(f"input {name!r}: 'shape' must be a list of integers")
    if any(d < 1 for d in shape):
        raise _fail(f"input {name!r}: every dimension of 'shape' must be at least 1, got {shape}")
    return shape


def _int_array(tensor: dict[str, Any], name: str, manifest: Manifest) -> npt.NDArray[np.int64]:
    shape = _shape(tensor, name)
    if len(shape) != 2:
        raise _fail(f"input {name!r}: shape must be [batch, sequence], got {shape}")
    _check_limits(shape[0], shape[1], manifest)
    datatype = tensor.get("datatype")
    if datatype not in ACCEPTED_INT_DATATYPES:
        raise _fail(f"input {name!r}: datatype must be INT64 (or INT32), got {datatype!r}")
    data = tensor.get("data")
    if not isinstance(data, list):
        raise _fail(f"input {name!r}: 'data' must be a list (flat, row-major, or nested to the shape)")
    try:
        array = np.asarray(data)
    except (ValueError, OverflowError):
        raise _fail(f"input {name!r}: 'data' is ragged or not numeric") from None
    if array.dtype.kind == "u":  # JSON integers past int64's range come out unsigned
        raise _fail(f"input {name!r}: values must fit in a signed 64-bit integer")
    if array.dtype.kind not in "ib":
        if array.size == 0:
            raise _fail(f"input {name!r}: 'data' is empty")
        raise _fail(f"input {name!r}: 'data' must hold integers ({datatype}), found {array.dtype.kind!r}-kind values")
    expected = math.prod(shape)
    if array.ndim == 1 and array.size == expected:
        array = array.reshape(shape)
    elif list(array.shape) != shape:
        raise _fail(f"input {name!r}: 'data' has shape {list(array.shape)} ({array.size} values), 'shape' says {shape}")
    return array.astype(np.int64, copy=False)


def _check_limits(rows: int, sequence: int, manifest: Manifest) -> None:
    if rows > manifest.max_batch:
        raise _fail(f"batch of {rows} rows exceeds the largest compiled batch bucket ({manifest.max_batch})")
    if sequence > manifest.max_sequence:
        raise _fail(
            f"sequence length {sequence} exceeds the largest compiled sequence bucket ({manifest.max_sequence})"
        )


def parse_infer(doc: dict[str, Any], manifest: Manifest, tokenize: Tokenize | None) -> InferRequest:
    """Validate a v2 infer request against the artifact's signature and limits."""
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise _fail("'id' must be a string")
    tensors = doc.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise _fail("'inputs' must be a non-empty list of tensors")
    if len(tensors) > len(manifest.inputs) + 1:
        raise _fail(f"too many inputs: the model takes {', '.join(s.name for s in manifest.inputs)}")
    by_name: dict[str, dict[str, Any]] = {}
    for tensor in tensors:
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise _fail("every input must be an object with a string 'name'")
        name = tensor["name"]
        if name in by_name:
            raise _fail(f"input {name!r} given twice")
        by_name[name] = tensor
    expected_names = [s.name for s in manifest.inputs]
    if TEXT_INPUT in by_name and TEXT_INPUT not in expected_names:
        if len(by_name) != 1:
            raise _fail(f"'{TEXT_INPUT}' cannot be combined with other inputs")
        return InferRequest(request_id, _text_arrays(by_name[TEXT_INPUT], manifest, tokenize))
    unknown = sorted(set(by_name) - set(expected_names))
    if unknown:
        raise _fail(f"unknown input(s) {', '.join(map(repr, unknown))}: the model takes {', '.join(expected_names)}")
    missing = [n for n in expected_names if n not in by_name]
    if missing:
        raise _fail(f"missing input(s): {', '.join(missing)}")
    arrays = []
    for sig in manifest.inputs:
        array = _int_array(by_name[sig.name], sig.name, manifest)
        if sig.min_value is not None and int(array.min()) < sig.min_value:
            raise _fail(f"input {sig.name!r}: values must be >= {sig.min_value}, found {int(array.min())}")
        if sig.max_value is not None and int(array.max()) > sig.max_value:
            raise _fail(f"input {sig.name!r}: values must be <= {sig.max_value}, found {int(array.max())}")
        arrays.append(array)
    if any(a.shape != arrays[0].shape for a in arrays):
        raise _fail(
            "all inputs must have the same shape: "
            + ", ".join(f"{s.name} {list(a.shape)}" for s, a in zip(manifest.inputs, arrays, strict=True))
        )
    return InferRequest(request_id, arrays)


def _text_arrays(tensor: dict[str, Any], manifest: Manifest, tokenize: Tokenize | None) -> list[npt.NDArray[np.int64]]:
    if tokenize is None:
        raise _fail(f"this model has no tokenizer: send {', '.join(s.name for s in manifest.inputs)} instead of text")
    if [s.name for s in manifest.inputs] != ["input_ids", "attention_mask"]:
        raise _fail("text input is only supported for models taking input_ids and attention_mask")
    shape = _shape(tensor, TEXT_INPUT)
    if tensor.get("datatype") != "BYTES":
        raise _fail(f"input 'text': datatype must be BYTES, got {tensor.get('datatype')!r}")
    data = tensor.get("data")
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        raise _fail("input 'text': 'data' must be a flat list of strings")
    if len(shape) != 1 or shape[0] != len(data):
        raise _fail(f"input 'text': shape must be [{len(data)}] for {len(data)} strings, got {shape}")
    _check_limits(len(data), 1, manifest)
    ids, mask = tokenize(data, manifest.max_sequence)
    return [ids, mask]


def infer_response(
    model_name: str, model_version: str, request_id: str | None, output_name: str, rows: npt.NDArray[np.float32]
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model_name": model_name,
        "model_version": model_version,
        "outputs": [
            {"name": output_name, "datatype": "FP32", "shape": list(rows.shape), "data": rows.ravel().tolist()}
        ],
    }
    if request_id is not None:
        doc["id"] = request_id
    return doc


def model_metadata(
    manifest: Manifest, version: str, accepts_text: bool, device: dict[str, Any] | None = None
) -> dict[str, Any]:
    inputs: list[dict[str, Any]] = [
        {"name": s.name, "datatype": s.v2_datatype, "shape": s.shape} for s in manifest.inputs
    ]
    if accepts_text:
        inputs.append({"name": TEXT_INPUT, "datatype": "BYTES", "shape": [-1], "optional": True})
    emulated = bool(device and device.get("emulated"))
    if emulated:
        platform = "emulated_neuroncore"
    else:
        platform = "pytorch_torchscript" if manifest.backend == "cpu" else "neuron_torchscript"
    doc: dict[str, Any] = {
        "name": manifest.name,
        "versions": [version],
        "platform": platform,
        "inputs": inputs,
        "outputs": [{"name": s.name, "datatype": s.v2_datatype, "shape": s.shape} for s in manifest.outputs],
        "parameters": {
            "backend": device["device"] if emulated and device else manifest.backend,
            "buckets": [[b.batch, b.sequence] for b in manifest.buckets],
            "output_description": manifest.output_description,
            "cache_key": manifest.cache_key,
        },
    }
    if emulated and device:
        doc["parameters"]["emulated_device"] = device
    return doc


def tokenizer_from_file(path: str) -> Tokenize:
    """A Tokenize over a Hugging Face tokenizer.json (the `tokenizers` package, a transformers dependency)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()

    def tokenize(texts: Sequence[str], max_length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        tokenizer.enable_truncation(max_length=max_length)
        encodings = tokenizer.encode_batch(list(texts))
        width = max(1, *(len(e.ids) for e in encodings))
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        return ids, mask

    return tokenize
