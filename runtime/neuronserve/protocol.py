"""KServe v2 (Open Inference Protocol): request validation and response shapes, JSON and binary.

Pure data handling (numpy only), so every rule about what the server accepts sits in one place and
each refusal carries the reason the client sees. The served models take 2-D [batch, sequence]
integer inputs; a model artifact that ships a tokenizer also accepts a BYTES tensor named ``text``
(strings are tokenized, truncated to the largest compiled sequence bucket).

Triton's binary tensor data extension (what tritonclient and the kserve SDK send by default):
the body is a JSON header of ``Inference-Header-Content-Length`` bytes followed by the raw
little-endian, row-major data of each input whose ``parameters.binary_data_size`` is set, in the
order the inputs are listed (a BYTES element is a 4-byte little-endian length and its UTF-8
bytes). An output is answered the same way when its ``parameters.binary_data`` is true, or when
the request's ``parameters.binary_data_output`` is and the output does not say otherwise.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from neuronserve.manifest import Manifest

TEXT_INPUT = "text"
ACCEPTED_INT_DATATYPES = ("INT64", "INT32")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_DTYPES: dict[str, np.dtype[np.signedinteger[Any]]] = {"INT64": np.dtype("<i8"), "INT32": np.dtype("<i4")}
NO_BINARY = memoryview(b"")

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
    # Answer the output as binary data (Triton's binary tensor data extension) instead of JSON.
    binary_output: bool = False

    @property
    def rows(self) -> int:
        return int(self.arrays[0].shape[0])

    @property
    def sequence(self) -> int:
        return int(self.arrays[0].shape[1])


@dataclass(frozen=True)
class TextRequest:
    """A validated text request, not tokenized yet: tokenizing can take up to about a second per
    megabyte of text (a text with no blank to cut it at, :func:`tokenize_with`), so the server does
    it off its event loop (``tokenized``)."""

    id: str | None
    texts: list[str]
    binary_output: bool = False

    def tokenized(self, manifest: Manifest, tokenize: Tokenize) -> InferRequest:
        """The request as token ids, truncated to the largest sequence bucket; a text the tokenizer
        refuses is a BadRequest (400)."""
        try:
            ids, mask = tokenize(self.texts, manifest.max_sequence)
        except Exception as exc:  # the tokenizer's only input is the client's text: its refusal is a 400
            raise _fail(f"input 'text': the tokenizer refused it: {exc}") from None
        return InferRequest(self.id, [ids, mask], self.binary_output)


def _fail(message: str) -> BadRequest:
    return BadRequest(message)


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        # orjson: several times faster than json on the request path. It refuses what the standard
        # parser takes (lone surrogates, NaN, numbers past a double); those get the standard parser,
        # so the validator below, not the parser, decides and words the answer.
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = _parse_json_slowly(body)
    if not isinstance(doc, dict):
        raise _fail("the request body must be a JSON object with an 'inputs' list")
    return doc


def _parse_json_slowly(body: bytes) -> Any:
    # json.loads of bytes guesses UTF-16 and UTF-32 and would serve them: the protocol's JSON is
    # UTF-8 (RFC 8259), a leading byte order mark tolerated. A NUL is never in UTF-8 JSON, and is
    # how text in UTF-16 or UTF-32 looks when read as UTF-8.
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(f"the request body must be JSON in UTF-8: {exc}") from None
    if "\x00" in text:
        raise _fail("the request body must be JSON in UTF-8: it holds NUL bytes (UTF-16 or UTF-32?)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise _fail("malformed JSON: nested too deeply") from None
    except ValueError:
        # Python's integer-string conversion limit (4,300 digits).
        raise _fail("malformed JSON: a number has thousands of digits; no tensor value holds it") from None
    return doc


def split_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview | None]:
    """The JSON header and the binary data after it (None: no ``Inference-Header-Content-Length``)."""
    if header_length is None:
        return parse_json(body), None
    # Decimal digits only, as Content-Length: int() also takes "+10", "1_0" and other digits than ASCII.
    if not re.fullmatch(r"-?[0-9]+", header_length):
        raise _fail(f"{HEADER_LENGTH} must be an integer in decimal digits, got {header_length!r}")
    length = int(header_length)
    if length < 0:
        raise _fail(f"{HEADER_LENGTH} must not be negative, got {length}")
    if length > len(body):
        raise _fail(f"{HEADER_LENGTH} {length} is larger than the body ({len(body)} bytes)")
    view = memoryview(body)
    return parse_json(view[:length].tobytes()), view[length:]


def _binary_size(tensor: dict[str, Any], name: str) -> int | None:
    parameters = tensor.get("parameters")
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        raise _fail(f"input {name!r}: 'parameters' must be an object")
    size = parameters.get("binary_data_size")
    if size is None:
        return None
    if type(size) is not int or size < 0:
        raise _fail(f"input {name!r}: binary_data_size must be a non-negative integer, got {size!r}")
    return size


def _binary_chunks(tensors: list[dict[str, Any]], blob: memoryview | None) -> dict[str, memoryview]:
    """Each binary input's bytes, cut from the data after the JSON header in the inputs' order."""
    chunks: dict[str, memoryview] = {}
    offset = 0
    for tensor in tensors:
        name = tensor["name"]
        size = _binary_size(tensor, name)
        if size is None:
            continue
        if blob is None:
            raise _fail(f"input {name!r}: binary_data_size needs the {HEADER_LENGTH} header")
        if "data" in tensor:
            raise _fail(f"input {name!r}: both 'data' and binary_data_size given; send one")
        if offset + size > len(blob):
            raise _fail(f"input {name!r}: binary data ends after {len(blob) - offset} of {size} bytes")
        chunks[name] = blob[offset : offset + size]
        offset += size
    if blob is not None and offset != len(blob):
        raise _fail(f"{len(blob) - offset} bytes of binary data after the last binary input")
    return chunks


def _shape(tensor: dict[str, Any], name: str) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise _fail(f"input {name!r}: 'shape' must be a list of integers")
    if any(d < 1 for d in shape):
        raise _fail(f"input {name!r}: every dimension of 'shape' must be at least 1, got {shape}")
    return shape


def _int_array(
    tensor: dict[str, Any], name: str, manifest: Manifest, chunk: memoryview | None, may_hold_booleans: bool = True
) -> npt.NDArray[np.int64]:
    shape = _shape(tensor, name)
    if len(shape) != 2:
        raise _fail(f"input {name!r}: shape must be [batch, sequence], got {shape}")
    _check_limits(shape[0], shape[1], manifest)
    datatype = tensor.get("datatype")
    if datatype not in ACCEPTED_INT_DATATYPES:
        raise _fail(f"input {name!r}: datatype must be INT64 (or INT32), got {datatype!r}")
    if chunk is not None:
        dtype = BINARY_DTYPES[datatype]
        expected_bytes = math.prod(shape) * dtype.itemsize
        if len(chunk) != expected_bytes:
            raise _fail(
                f"input {name!r}: binary_data_size {len(chunk)} does not match shape {shape} of {datatype} "
                f"({expected_bytes} bytes)"
            )
        binary: npt.NDArray[np.int64] = np.frombuffer(chunk, dtype=dtype).reshape(shape).astype(np.int64, copy=False)
        return binary
    data = tensor.get("data")
    if not isinstance(data, list):
        raise _fail(f"input {name!r}: 'data' must be a list (flat, row-major, or nested to the shape)")
    try:
        array = np.asarray(data)
    except (ValueError, OverflowError):
        raise _fail(f"input {name!r}: 'data' is ragged or not numeric") from None
    # JSON true/false are not integers: numpy makes booleans of them, or 1 and 0 among integers.
    if array.dtype.kind != "i" or (may_hold_booleans and _holds_boolean(data)):
        if array.size == 0:
            raise _fail(f"input {name!r}: 'data' is empty")
        # numpy names what it made of the values (uint64, float64, object), not what is wrong with them.
        raise _fail(f"input {name!r}: {_first_non_int64(data, datatype)}")
    expected = math.prod(shape)
    if array.ndim == 1 and array.size == expected:
        array = array.reshape(shape)
    elif list(array.shape) != shape:
        raise _fail(f"input {name!r}: 'data' has shape {list(array.shape)} ({array.size} values), 'shape' says {shape}")
    return array.astype(np.int64, copy=False)


def _holds_boolean(data: list[Any]) -> bool:
    """Whether (nested) ``data`` holds a JSON true or false."""
    pending = [data]
    while pending:
        for value in pending.pop():
            if type(value) is bool:
                return True
            if type(value) is list:
                pending.append(value)
    return False


def _first_non_int64(data: list[Any], datatype: str) -> str:
    """What is wrong with the first value of (nested) ``data`` that is not a signed 64-bit integer."""
    pending: list[Any] = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending.extend(reversed(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            if not INT64_MIN <= value <= INT64_MAX:
                return f"values must fit in a signed 64-bit integer, found {value}"
        elif isinstance(value, float) and value.is_integer() and not INT64_MIN < value <= INT64_MAX:
            # orjson reads an integer past 64 bits as a float: one just below INT64_MIN (down to
            # 1,024 below) rounds to exactly INT64_MIN, and is no float the client meant.
            return f"values must fit in a signed 64-bit integer, found about {value:.3g}"
        else:
            found = "null" if value is None else json.dumps(value)
            if len(found) > 40:
                found = found[:37] + "..."
            return f"'data' must hold integers ({datatype}), found {found}"
    return f"'data' must hold integers ({datatype})"


def _check_fits(array: npt.NDArray[np.int64], name: str, datatype: str) -> None:
    """Refuse values ``datatype`` cannot hold: cast to it they would wrap around, silently."""
    info = np.iinfo(BINARY_DTYPES[datatype])
    if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
        raise _fail(f"input {name!r}: values must fit in {datatype} ({info.min} to {info.max})")


def _check_limits(rows: int, sequence: int, manifest: Manifest) -> None:
    if rows > manifest.max_batch:
        raise _fail(f"batch of {rows} rows exceeds the largest compiled batch bucket ({manifest.max_batch})")
    if sequence > manifest.max_sequence:
        raise _fail(
            f"sequence length {sequence} exceeds the largest compiled sequence bucket ({manifest.max_sequence})"
        )


def parse_request(
    body: bytes, header_length: str | None, manifest: Manifest, tokenize: Tokenize | None
) -> InferRequest:
    """Validate an infer request body (JSON, or JSON header + binary data) against the artifact."""
    request = parse_request_untokenized(body, header_length, manifest, tokenize is not None)
    return _tokenized(request, manifest, tokenize)


def parse_request_untokenized(
    body: bytes, header_length: str | None, manifest: Manifest, accepts_text: bool
) -> InferRequest | TextRequest:
    """As ``parse_request``, but a text request is validated and left to tokenize (``TextRequest``)."""
    doc, blob = split_body(body, header_length)
    # Integer data lists are searched for JSON booleans only if the JSON text holds one at all: a
    # search of the bytes is a few microseconds, a walk of every value as long as numpy's conversion.
    json_end = len(body) - (len(blob) if blob is not None else 0)
    booleans = body.find(b"true", 0, json_end) >= 0 or body.find(b"false", 0, json_end) >= 0
    return _parse_infer(doc, manifest, accepts_text, blob, may_hold_booleans=booleans)


def _tokenized(request: InferRequest | TextRequest, manifest: Manifest, tokenize: Tokenize | None) -> InferRequest:
    if isinstance(request, InferRequest):
        return request
    assert tokenize is not None  # a TextRequest is only made when there is a tokenizer
    return request.tokenized(manifest, tokenize)


def _binary_output(doc: dict[str, Any], manifest: Manifest) -> bool:
    """Whether the (single) output goes back as binary data; refuses outputs the model does not have."""
    parameters = doc.get("parameters", {})
    if not isinstance(parameters, dict):
        raise _fail("'parameters' must be an object")
    binary = parameters.get("binary_data_output", False)
    if not isinstance(binary, bool):
        raise _fail(f"binary_data_output must be true or false, got {binary!r}")
    requested = doc.get("outputs")
    if requested is None:
        return binary
    if not isinstance(requested, list):
        raise _fail("'outputs' must be a list of {name, parameters} objects")
    known = [s.name for s in manifest.outputs]
    seen: set[str] = set()
    for output in requested:
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise _fail("every requested output must be an object with a string 'name'")
        name = output["name"]
        if name not in known:
            raise _fail(f"unknown output {name!r}: the model has {', '.join(known)}")
        if name in seen:
            raise _fail(f"output {name!r} requested twice")
        seen.add(name)
        out_parameters = output.get("parameters", {})
        if not isinstance(out_parameters, dict):
            raise _fail(f"output {name!r}: 'parameters' must be an object")
        if out_parameters.get("classification"):
            raise _fail(f"output {name!r}: the classification extension is not supported")
        out_binary = out_parameters.get("binary_data", binary)
        if not isinstance(out_binary, bool):
            raise _fail(f"output {name!r}: binary_data must be true or false, got {out_binary!r}")
        binary = out_binary
    return binary


def parse_infer(
    doc: dict[str, Any],
    manifest: Manifest,
    tokenize: Tokenize | None,
    blob: memoryview | None = None,
    may_hold_booleans: bool = True,
) -> InferRequest:
    """Validate a v2 infer request against the artifact's signature and limits.

    ``blob``: the binary data after the JSON header (None when the request had no header length).
    ``may_hold_booleans`` false: the JSON had no true or false anywhere (no data list is searched).
    """
    request = _parse_infer(doc, manifest, tokenize is not None, blob, may_hold_booleans)
    return _tokenized(request, manifest, tokenize)


def _parse_infer(
    doc: dict[str, Any],
    manifest: Manifest,
    accepts_text: bool,
    blob: memoryview | None,
    may_hold_booleans: bool,
) -> InferRequest | TextRequest:
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise _fail("'id' must be a string")
    if request_id is not None:
        try:
            request_id.encode("utf-8")
        except UnicodeEncodeError as exc:
            # JSON can carry lone surrogates ("\ud800"); the response, UTF-8, could not echo the id.
            raise _fail(f"'id' is not valid Unicode (lone surrogate at character {exc.start})") from None
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
    chunks = _binary_chunks(tensors, blob)
    binary_output = _binary_output(doc, manifest)
    expected_names = [s.name for s in manifest.inputs]
    if TEXT_INPUT in by_name and TEXT_INPUT not in expected_names:
        if len(by_name) != 1:
            raise _fail(f"'{TEXT_INPUT}' cannot be combined with other inputs")
        texts = _texts(by_name[TEXT_INPUT], manifest, accepts_text, chunks.get(TEXT_INPUT))
        return TextRequest(request_id, texts, binary_output)
    unknown = sorted(set(by_name) - set(expected_names))
    if unknown:
        raise _fail(f"unknown input(s) {', '.join(map(repr, unknown))}: the model takes {', '.join(expected_names)}")
    missing = [n for n in expected_names if n not in by_name]
    if missing:
        raise _fail(f"missing input(s): {', '.join(missing)}")
    arrays = []
    for sig in manifest.inputs:
        tensor = by_name[sig.name]
        array = _int_array(tensor, sig.name, manifest, chunks.get(sig.name), may_hold_booleans)
        # Both the datatype the client declared and the one the model takes must hold every value.
        for datatype in {tensor["datatype"], sig.v2_datatype} & {"INT32"}:
            _check_fits(array, sig.name, datatype)
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
    return InferRequest(request_id, arrays, binary_output)


def _binary_strings(chunk: memoryview, name: str) -> list[str]:
    """A binary BYTES tensor: each element a 4-byte little-endian length and that many UTF-8 bytes."""
    strings: list[str] = []
    offset = 0
    while offset < len(chunk):
        index = len(strings)
        if offset + 4 > len(chunk):
            raise _fail(f"input {name!r}: element {index} runs past the end of the tensor's binary data")
        (length,) = struct.unpack_from("<I", chunk, offset)
        offset += 4
        if offset + length > len(chunk):
            raise _fail(f"input {name!r}: element {index} runs past the end of the tensor's binary data")
        try:
            strings.append(chunk[offset : offset + length].tobytes().decode("utf-8"))
        except UnicodeDecodeError:
            raise _fail(f"input {name!r}: element {index} is not valid UTF-8") from None
        offset += length
    return strings


def _texts(tensor: dict[str, Any], manifest: Manifest, accepts_text: bool, chunk: memoryview | None) -> list[str]:
    if not accepts_text:
        raise _fail(f"this model has no tokenizer: send {', '.join(s.name for s in manifest.inputs)} instead of text")
    if [s.name for s in manifest.inputs] != ["input_ids", "attention_mask"]:
        raise _fail("text input is only supported for models taking input_ids and attention_mask")
    shape = _shape(tensor, TEXT_INPUT)
    if tensor.get("datatype") != "BYTES":
        raise _fail(f"input 'text': datatype must be BYTES, got {tensor.get('datatype')!r}")
    data = _binary_strings(chunk, TEXT_INPUT) if chunk is not None else tensor.get("data")
    if not isinstance(data, list):
        raise _fail("input 'text': 'data' must be a list of strings")
    # One string per row, as [n] or [n, 1] (tritonclient's usual shape); with [n, 1] the data may
    # also be nested to the shape, one one-string list per row.
    if shape[1:] == [1] and data and all(isinstance(row, list) and len(row) == 1 for row in data):
        data = [row[0] for row in data]
    if not all(isinstance(s, str) for s in data):
        raise _fail("input 'text': 'data' must be a list of strings (or, with shape [n, 1], of one-string lists)")
    if shape not in ([len(data)], [len(data), 1]):
        raise _fail(
            f"input 'text': shape must be [{len(data)}] or [{len(data)}, 1] for {len(data)} strings, got {shape}"
        )
    _check_limits(len(data), 1, manifest)
    for index, text in enumerate(data):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            # JSON can carry lone surrogates ("\ud800") that no UTF-8 tokenizer takes.
            raise _fail(
                f"input 'text': element {index} is not valid Unicode (lone surrogate at character {exc.start})"
            ) from None
    return data


def infer_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    output_name: str,
    rows: npt.NDArray[np.float32],
    binary: bool = False,
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when binary data follows it (else None)."""
    output: dict[str, Any] = {"name": output_name, "datatype": "FP32", "shape": list(rows.shape)}
    raw = b""
    if binary:
        raw = np.ascontiguousarray(rows, dtype="<f4").tobytes()
        output["parameters"] = {"binary_data_size": len(raw)}
    else:
        # orjson writes float32 arrays directly, each value in its shortest float32 form (what
        # float32 holds, not 17 digits of its double), about 30x faster than json on a 384-wide row.
        output["data"] = np.ascontiguousarray(rows, dtype=np.float32).ravel()
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": [output]}
    if request_id is not None:
        doc["id"] = request_id
    if parameters:
        doc["parameters"] = parameters
    header = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not binary:
        return header, None
    return header + raw, len(header)


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


def tokenizer_from_file(path: str, max_length: int) -> Tokenize:
    """A Tokenize over a Hugging Face tokenizer.json (the `tokenizers` package, a transformers
    dependency) that truncates at ``max_length`` tokens (the manifest's largest sequence bucket)."""
    from tokenizers import Tokenizer

    return tokenize_with(Tokenizer.from_file(path), max_length)


#: Characters of a long text tokenized first, per token kept (:func:`tokenize_with`): English
#: averages 4-5 characters a token; a prefix that still yields too few tokens (much whitespace,
#: characters the normalizer drops) is tokenized whole instead.
PREFIX_CHARS_PER_TOKEN = 16
#: The end of a word followed by ASCII whitespace: where a cut leaves the tokens before it as the
#: whole text has them (every tokenizer whitespace-splits at ASCII blanks).
_WORD_END = re.compile(r"(?<=\S)[ \t\n\r]")


def _splits_at_whitespace(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s pre-tokenizer splits words at a blank (BERT, byte-level BPE, SentencePiece's
    Metaspace): then the tokens of a prefix cut at a word end are the first tokens of the whole text."""
    pre_tokenizer = getattr(tokenizer, "pre_tokenizer", None)
    if pre_tokenizer is None:
        return False
    try:
        pieces = pre_tokenizer.pre_tokenize_str("ab cd")
    except Exception:  # an exotic pre-tokenizer: tokenize every text whole, as before
        return False
    return len(pieces) == 2 and pieces[0][1][1] <= 2


def tokenize_with(tokenizer: Any, max_length: int) -> Tokenize:
    """A Tokenize over a ``tokenizers.Tokenizer``, truncating at ``max_length`` tokens.

    The truncation is set here, once: setting it on each call waited for every encoding in progress
    in the other tokenizer threads, so a short text tokenized beside a megabyte of text waited the
    second that one took. Encodings themselves run side by side. A call
    for another length is refused (ValueError): the one tokenizer is shared by the threads.

    A text longer than :data:`PREFIX_CHARS_PER_TOKEN` characters per kept token is first tokenized
    only up to the end of a word past that many characters: when that prefix fills ``max_length``,
    its tokens are the whole text's (words are tokenized apart), and a megabyte of text costs what
    its first kilobytes do (1.5 ms instead of 0.7 s of CPU for MiniLM). A prefix that does not fill
    it, a text with no blank to cut at, or a tokenizer that does not split words at blanks, is
    tokenized whole.
    """
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    truncation = max_length
    prefix_chars = max_length * PREFIX_CHARS_PER_TOKEN if _splits_at_whitespace(tokenizer) else None

    def cut(text: str) -> str:
        if prefix_chars is None or len(text) <= prefix_chars:
            return text
        end = _WORD_END.search(text, prefix_chars)
        return text[: end.start()] if end else text

    def tokenize(texts: Sequence[str], max_length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if max_length != truncation:
            raise ValueError(f"this tokenizer truncates at {truncation} tokens, not {max_length}")
        cuts = [cut(text) for text in texts]
        encodings = tokenizer.encode_batch(cuts)
        short = [
            row
            for row, (text, prefix, enc) in enumerate(zip(texts, cuts, encodings, strict=True))
            if len(prefix) < len(text) and len(enc.ids) < truncation
        ]
        if short:
            for row, enc in zip(short, tokenizer.encode_batch([texts[row] for row in short]), strict=True):
                encodings[row] = enc
        width = max(1, *(len(e.ids) for e in encodings))
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        return ids, mask

    return tokenize
