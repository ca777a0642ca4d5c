"""Third-party KServe v2 clients as they ship, against the in-process server with the real MiniLM.

tritonclient's HTTP client with its defaults sends INT64 tensors with Triton's binary tensor data
extension (``Inference-Header-Content-Length`` + ``binary_data_size``) and asks for binary outputs
(``binary_data_output``); the server must answer both ways, versioned routes must work, unknown
outputs and texts the tokenizer refuses must get 400s, and every outcome must be counted.

The kserve SDK (``kserve.InferInput.set_data_from_numpy``, binary by default, sent by its
``InferenceRESTClient``) writes the same wire format and is driven here too.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from runtime_support import MODEL_NAME, LiveServer, Reference, http_json

SENTENCES = ["Hello world.", "The quick brown fox jumps over the lazy dog.", "a"]


def _client(server: LiveServer) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(url=server.url.removeprefix("http://"))


def _token_arrays(reference: Reference, sentences: list[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rows = [reference.tokens(s) for s in sentences]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = row
        mask[index, : len(row)] = 1
    return ids, mask


def _inputs(ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any], binary: bool = True) -> list[triton.InferInput]:
    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        tensor = triton.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return inputs


def _counts(server: LiveServer) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = http_json(server.url, "GET", "/metrics")[2]
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "neuronserve_requests_total"
    }


def test_tritonclient_with_its_defaults_gets_the_models_embeddings(
    live_server: LiveServer, reference: Reference
) -> None:
    ids, mask = _token_arrays(reference, SENTENCES)
    with _client(live_server) as client:
        assert client.is_server_ready()
        assert client.is_model_ready(MODEL_NAME)
        result = client.infer(MODEL_NAME, _inputs(ids, mask))
    # No outputs named: the client asked for every output as binary data.
    assert result.get_output("embedding")["parameters"] == {"binary_data_size": len(SENTENCES) * 384 * 4}
    np.testing.assert_allclose(result.as_numpy("embedding"), reference.embed(SENTENCES), atol=1e-4)


def test_binary_inputs_with_json_outputs_and_json_inputs_with_binary_outputs(
    live_server: LiveServer, reference: Reference
) -> None:
    ids, mask = _token_arrays(reference, SENTENCES)
    expected = reference.embed(SENTENCES)
    with _client(live_server) as client:
        as_json = client.infer(
            MODEL_NAME, _inputs(ids, mask), outputs=[triton.InferRequestedOutput("embedding", binary_data=False)]
        )
        assert "data" in as_json.get_output("embedding")
        np.testing.assert_allclose(as_json.as_numpy("embedding"), expected, atol=1e-4)

        as_binary = client.infer(
            MODEL_NAME,
            _inputs(ids, mask, binary=False),
            outputs=[triton.InferRequestedOutput("embedding", binary_data=True)],
            request_id="r-7",
        )
        assert as_binary.get_response()["id"] == "r-7"
        np.testing.assert_allclose(as_binary.as_numpy("embedding"), expected, atol=1e-4)


def test_text_as_a_binary_bytes_tensor(live_server: LiveServer, reference: Reference) -> None:
    text = triton.InferInput("text", [len(SENTENCES)], "BYTES")
    text.set_data_from_numpy(np.array([s.encode() for s in SENTENCES], dtype=np.object_))
    with _client(live_server) as client:
        result = client.infer(MODEL_NAME, [text])
    np.testing.assert_allclose(result.as_numpy("embedding"), reference.embed(SENTENCES), atol=1e-4)


@pytest.mark.parametrize("binary", [True, False])
def test_text_shaped_one_string_per_row_as_tritonclient_sends_it(
    live_server: LiveServer, reference: Reference, binary: bool
) -> None:
    # [n, 1]: a column of strings, the shape tritonclient's examples and most users give a BYTES input.
    text = triton.InferInput("text", [len(SENTENCES), 1], "BYTES")
    text.set_data_from_numpy(np.array([[s.encode()] for s in SENTENCES], dtype=np.object_), binary_data=binary)
    with _client(live_server) as client:
        result = client.infer(MODEL_NAME, [text])
    np.testing.assert_allclose(result.as_numpy("embedding"), reference.embed(SENTENCES), atol=1e-4)


def test_versioned_metadata_ready_and_infer(live_server: LiveServer, reference: Reference) -> None:
    ids, mask = _token_arrays(reference, SENTENCES[:1])
    with _client(live_server) as client:
        (version,) = client.get_model_metadata(MODEL_NAME)["versions"]
        meta = client.get_model_metadata(MODEL_NAME, model_version=version)
        assert meta["name"] == MODEL_NAME and meta["versions"] == [version]
        assert client.is_model_ready(MODEL_NAME, model_version=version)
        result = client.infer(MODEL_NAME, _inputs(ids, mask), model_version=version)
        np.testing.assert_allclose(result.as_numpy("embedding"), reference.embed(SENTENCES[:1]), atol=1e-4)
        with pytest.raises(InferenceServerException, match="unknown version '0000000000'"):
            client.get_model_metadata(MODEL_NAME, model_version="0000000000")
    status, _, doc = http_json(live_server.url, "GET", f"/v2/models/{MODEL_NAME}/versions/0000000000/ready")
    assert status == 404, doc


def test_an_unknown_requested_output_is_refused(live_server: LiveServer, reference: Reference) -> None:
    ids, mask = _token_arrays(reference, SENTENCES[:1])
    with _client(live_server) as client, pytest.raises(InferenceServerException) as refused:
        client.infer(MODEL_NAME, _inputs(ids, mask), outputs=[triton.InferRequestedOutput("logits")])
    assert refused.value.status() == "400"
    assert "unknown output 'logits': the model has embedding" in refused.value.message()


def _framed(header: dict[str, Any], blob: bytes, header_length: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(header).encode()
    length = len(raw) if header_length is None else header_length
    return raw + blob, {"Inference-Header-Content-Length": str(length)}


def _binary_ids(shape: list[int], size: int | None = None, datatype: str = "INT64") -> dict[str, Any]:
    count = int(np.prod(shape))
    itemsize = 8 if datatype == "INT64" else 4
    return {
        "name": "input_ids",
        "shape": shape,
        "datatype": datatype,
        "parameters": {"binary_data_size": count * itemsize if size is None else size},
    }


MASK_1x4 = {"name": "attention_mask", "shape": [1, 4], "datatype": "INT64", "data": [1, 1, 1, 1]}
IDS_1x4 = np.array([[101, 7592, 2088, 102]], dtype="<i8").tobytes()
FRAMED_1x4, _FRAMED_HEAD = _framed({"inputs": [_binary_ids([1, 4]), MASK_1x4]}, IDS_1x4)
FRAMED_1x4_LENGTH = _FRAMED_HEAD["Inference-Header-Content-Length"]
BAD_BINARY: list[tuple[str, bytes, dict[str, str], str]] = [
    (
        "header length past the body",
        *_framed({"inputs": [_binary_ids([1, 4]), MASK_1x4]}, IDS_1x4, header_length=10_000),
        "Inference-Header-Content-Length 10000 is larger than the body",
    ),
    ("header length not a number", b"{}", {"Inference-Header-Content-Length": "ten"}, "must be an integer"),
    # int() takes these; the header, like Content-Length, is decimal digits only.
    *(
        (
            f"header length {spelling}",
            FRAMED_1x4,
            {"Inference-Header-Content-Length": spelling.format(FRAMED_1x4_LENGTH)},
            "Inference-Header-Content-Length must be an integer in decimal digits, got",
        )
        for spelling in ("+{}", "0_{}")
    ),
    (
        "header length negative",
        b"{}",
        {"Inference-Header-Content-Length": "-1"},
        "Inference-Header-Content-Length must not be negative, got -1",
    ),
    (
        "binary size disagrees with the shape",
        *_framed({"inputs": [_binary_ids([1, 4], size=24), MASK_1x4]}, IDS_1x4[:24]),
        "binary_data_size 24 does not match shape [1, 4] of INT64 (32 bytes)",
    ),
    (
        "binary size negative",
        *_framed({"inputs": [_binary_ids([1, 4], size=-8), MASK_1x4]}, IDS_1x4),
        "input 'input_ids': binary_data_size must be a non-negative integer, got -8",
    ),
    (
        # Zero is a size: checked against the shape like any other, not refused as negative.
        "binary size zero",
        *_framed({"inputs": [_binary_ids([1, 4], size=0), MASK_1x4]}, b""),
        "binary_data_size 0 does not match shape [1, 4] of INT64 (32 bytes)",
    ),
    (
        "binary sizes exceed the body",
        *_framed({"inputs": [_binary_ids([1, 4]), MASK_1x4]}, IDS_1x4[:16]),
        "binary data ends after 16 of 32 bytes",
    ),
    (
        "bytes left over",
        *_framed({"inputs": [_binary_ids([1, 4]), MASK_1x4]}, IDS_1x4 + b"\0" * 8),
        "8 bytes of binary data after the last binary input",
    ),
    (
        "binary and data at once",
        *_framed({"inputs": [{**_binary_ids([1, 4]), "data": [1, 2, 3, 4]}, MASK_1x4]}, IDS_1x4),
        "both 'data' and binary_data_size",
    ),
    (
        "binary size without a header length",
        json.dumps({"inputs": [_binary_ids([1, 4]), MASK_1x4]}).encode(),
        {},
        "binary_data_size needs the Inference-Header-Content-Length header",
    ),
    (
        "text that is not UTF-8",
        *_framed(
            {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]},
            struct.pack("<I", 2) + b"\xff\xfe",
        ),
        "input 'text': element 0 is not valid UTF-8",
    ),
    (
        "a string length past the tensor",
        *_framed(
            {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]},
            struct.pack("<I", 9) + b"ab",
        ),
        "input 'text': element 0 runs past the end",
    ),
    (
        # Two bytes left where the next element's 4-byte length should be.
        "a string's length cut short",
        *_framed(
            {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}]},
            struct.pack("<I", 2) + b"ab" + b"\x01\x00",
        ),
        "input 'text': element 1 runs past the end",
    ),
    (
        # Zero is not negative: an empty JSON header, refused as one.
        "header length zero",
        *_framed({"inputs": [_binary_ids([1, 4]), MASK_1x4]}, IDS_1x4, header_length=0),
        "malformed JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    (
        "classification",
        *_framed(
            {
                "inputs": [_binary_ids([1, 4]), MASK_1x4],
                "outputs": [{"name": "embedding", "parameters": {"classification": 3}}],
            },
            IDS_1x4,
        ),
        "the classification extension is not supported",
    ),
]


@pytest.mark.parametrize(("case", "body", "headers", "message"), BAD_BINARY, ids=[c[0] for c in BAD_BINARY])
def test_malformed_binary_requests_get_400_with_the_reason(
    live_server: LiveServer, case: str, body: bytes, headers: dict[str, str], message: str
) -> None:
    import http.client
    import urllib.parse

    parsed = urllib.parse.urlsplit(live_server.url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{MODEL_NAME}/infer", body=body, headers=headers)
        response = conn.getresponse()
        doc = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 400, doc
    assert message in doc["error"]


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff then", "\x00"], ids=["lone high", "lone low", "nul"])
def test_text_the_tokenizer_refuses_gets_400_and_is_counted(live_server: LiveServer, text: str) -> None:
    body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}).encode()
    before = _counts(live_server)
    status, _, doc = http_json(live_server.url, "POST", f"/v2/models/{MODEL_NAME}/infer", body)
    after = _counts(live_server)
    if text == "\x00":  # a NUL is a character like any other to the tokenizer
        assert status == 200, doc
        assert after["ok"] - before["ok"] == 1
        return
    assert status == 400, doc
    assert "not valid Unicode" in doc["error"]
    assert after["bad_request"] - before["bad_request"] == 1


async def test_the_kserve_sdk_with_binary_inputs_gets_the_models_embeddings(
    live_server: LiveServer, reference: Reference
) -> None:
    from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
    from kserve.protocol.infer_type import RequestedOutput

    ids, mask = _token_arrays(reference, SENTENCES)
    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        tensor = InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)  # binary_data=True: the SDK's default
        inputs.append(tensor)
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0))
    expected = reference.embed(SENTENCES)
    for binary_output in (False, True):
        request = InferRequest(
            model_name=MODEL_NAME,
            infer_inputs=inputs,
            request_outputs=[RequestedOutput("embedding", {"binary_data": binary_output})],
        )
        response = await client.infer(live_server.url, request, model_name=MODEL_NAME)
        (output,) = response.outputs
        assert output.name == "embedding"
        np.testing.assert_allclose(output.as_numpy(), expected, atol=1e-4)
