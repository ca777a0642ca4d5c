"""The KServe v2 HTTP server in-process: outputs equal the model run directly, refusals carry reasons."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
import urllib.parse
import zlib
from typing import Any

import aiohttp
import numpy as np
import pytest

from neuronserve.codings import CODINGS
from runtime_support import MODEL_NAME, LiveServer, Reference, http_json, scrape_metrics, wait_for

INFER = f"/v2/models/{MODEL_NAME}/infer"
SENTENCES = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    # more than 32 tokens: lands in the 128 bucket
    "Inferentia2 accelerators serve transformer models; a dynamic batcher pads each batch of requests "
    "to the nearest compiled shape, runs it once, and hands every caller its own rows back, quickly.",
    "a",
]


def _tensor_request(ids: list[list[int]], request_id: str | None = None) -> dict[str, Any]:
    width = max(len(row) for row in ids)
    padded = [row + [0] * (width - len(row)) for row in ids]
    mask = [[1] * len(row) + [0] * (width - len(row)) for row in ids]
    doc: dict[str, Any] = {
        "inputs": [
            {"name": "input_ids", "shape": [len(ids), width], "datatype": "INT64", "data": padded},
            {
                "name": "attention_mask",
                "shape": [len(ids), width],
                "datatype": "INT64",
                "data": [v for row in mask for v in row],
            },
        ]
    }
    if request_id is not None:
        doc["id"] = request_id
    return doc


def _embedding(doc: dict[str, Any]) -> np.ndarray[Any, Any]:
    (output,) = doc["outputs"]
    assert output["name"] == "embedding"
    assert output["datatype"] == "FP32"
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])


def test_health_and_metadata(live_server: LiveServer) -> None:
    assert http_json(live_server.url, "GET", "/v2/health/live")[:1] == (200,)
    assert http_json(live_server.url, "GET", "/v2/health/ready")[2] == {
        "ready": True,
        "phase": "ready",
        "device": "cpu",
        "emulated": False,
        "cores_out": 0,
    }
    status, _, meta = http_json(live_server.url, "GET", f"/v2/models/{MODEL_NAME}")
    assert status == 200
    assert meta["name"] == MODEL_NAME
    assert meta["platform"] == "pytorch_torchscript"
    assert meta["inputs"][:2] == [
        {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]},
    ]
    assert meta["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}]
    assert meta["parameters"]["backend"] == "cpu"


def test_infer_equals_the_model_run_directly(live_server: LiveServer, reference: Reference) -> None:
    expected = reference.embed(SENTENCES)
    for index, sentence in enumerate(SENTENCES):
        body = json.dumps(_tensor_request([reference.tokens(sentence)], request_id=f"r{index}")).encode()
        status, _, doc = http_json(live_server.url, "POST", INFER, body)
        assert status == 200, doc
        assert doc["id"] == f"r{index}"
        assert doc["model_name"] == MODEL_NAME
        np.testing.assert_allclose(_embedding(doc)[0], expected[index], atol=1e-4)


def test_a_multi_row_request_and_text_input_equal_the_model(live_server: LiveServer, reference: Reference) -> None:
    expected = reference.embed(SENTENCES)
    body = json.dumps(_tensor_request([reference.tokens(s) for s in SENTENCES])).encode()
    status, _, doc = http_json(live_server.url, "POST", INFER, body)
    assert status == 200, doc
    np.testing.assert_allclose(_embedding(doc), expected, atol=1e-4)

    text = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(SENTENCES)], "data": SENTENCES}]}
    status, _, doc = http_json(live_server.url, "POST", INFER, json.dumps(text).encode())
    assert status == 200, doc
    np.testing.assert_allclose(_embedding(doc), expected, atol=1e-4)


async def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(
    live_server: LiveServer, reference: Reference
) -> None:
    sentences = [f"request number {i} says {'hello ' * (i % 7)}" for i in range(16)]
    expected = reference.embed(sentences)
    before = scrape_metrics(live_server.url)

    async with aiohttp.ClientSession() as session:

        async def one(sentence: str) -> dict[str, Any]:
            body = _tensor_request([reference.tokens(sentence)])
            async with session.post(live_server.url + INFER, json=body) as response:
                assert response.status == 200
                result: dict[str, Any] = await response.json()
                return result

        docs = await asyncio.gather(*(one(s) for s in sentences))

    for doc, row in zip(docs, expected, strict=True):
        np.testing.assert_allclose(_embedding(doc)[0], row, atol=1e-4)
    after = scrape_metrics(live_server.url)
    batches = after["neuronserve_batch_size_count"] - before["neuronserve_batch_size_count"]
    rows = after["neuronserve_batch_size_sum"] - before["neuronserve_batch_size_sum"]
    assert rows == len(sentences)
    assert batches < len(sentences), "no two requests shared a batch"
    assert after["neuronserve_requests_total{outcome=ok}"] - before["neuronserve_requests_total{outcome=ok}"] == 16


def _ids(shape: list[int], value: int = 5, datatype: str = "INT64") -> dict[str, Any]:
    count = int(np.prod(shape))
    return {"name": "input_ids", "shape": shape, "datatype": datatype, "data": [value] * count}


def _mask(shape: list[int]) -> dict[str, Any]:
    return {"name": "attention_mask", "shape": shape, "datatype": "INT64", "data": [1] * int(np.prod(shape))}


BAD_REQUESTS: list[tuple[str, bytes, int, str]] = [
    ("malformed json", b'{"inputs": [', 400, "malformed JSON"),
    ("not an object", b"[1, 2]", 400, "must be a JSON object"),
    # json.loads guesses these from bytes; the protocol's JSON is UTF-8.
    *(
        (
            f"JSON in {encoding}",
            json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode(encoding),
            400,
            "the request body must be JSON in UTF-8",
        )
        for encoding in ("utf-16", "utf-16-le", "utf-32")
    ),
    ("not UTF-8", b'{"inputs": "\xff"}', 400, "the request body must be JSON in UTF-8: 'utf-8' codec can't decode"),
    ("no inputs", b'{"inputs": []}', 400, "non-empty list"),
    ("missing mask", json.dumps({"inputs": [_ids([1, 4])]}).encode(), 400, "missing input(s): attention_mask"),
    (
        "wrong dtype",
        json.dumps({"inputs": [_ids([1, 4], datatype="FP32"), _mask([1, 4])]}).encode(),
        400,
        "datatype must be INT64",
    ),
    (
        "float data",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [1.5, 2.0]}, _mask([1, 2])]}).encode(),
        400,
        "input 'input_ids': 'data' must hold integers (INT64), found 1.5",
    ),
    (
        "shape and data disagree",
        json.dumps({"inputs": [{**_ids([1, 4]), "data": [1, 2, 3]}, _mask([1, 4])]}).encode(),
        400,
        "'shape' says [1, 4]",
    ),
    (
        "three dimensions",
        json.dumps({"inputs": [_ids([1, 2, 2]), _mask([1, 2, 2])]}).encode(),
        400,
        "shape must be [batch, sequence]",
    ),
    (
        "too long",
        json.dumps({"inputs": [_ids([1, 129]), _mask([1, 129])]}).encode(),
        400,
        "sequence length 129 exceeds the largest compiled sequence bucket (128)",
    ),
    (
        "too many rows",
        json.dumps({"inputs": [_ids([5, 4]), _mask([5, 4])]}).encode(),
        400,
        "batch of 5 rows exceeds the largest compiled batch bucket (4)",
    ),
    (
        "id out of vocabulary",
        json.dumps({"inputs": [_ids([1, 4], value=30522), _mask([1, 4])]}).encode(),
        400,
        "values must be <= 30521",
    ),
    (
        "negative id",
        json.dumps({"inputs": [_ids([1, 4], value=-1), _mask([1, 4])]}).encode(),
        400,
        "values must be >= 0",
    ),
    (
        "inputs of different shapes",
        json.dumps({"inputs": [_ids([1, 4]), _mask([1, 3])]}).encode(),
        400,
        "same shape",
    ),
    (
        "unknown input",
        json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4]), {**_mask([1, 4]), "name": "x"}]}).encode(),
        400,
        "unknown input(s) 'x'",
    ),
    (
        # One input past the model's is answered by name (above, or text beside the inputs); more are
        # refused by their count before each is read.
        "two inputs past the model's",
        json.dumps(
            {"inputs": [_ids([1, 4]), _mask([1, 4]), *({**_mask([1, 4]), "name": name} for name in "xy")]}
        ).encode(),
        400,
        "too many inputs: the model takes input_ids, attention_mask",
    ),
    (
        "integer beyond int64",
        json.dumps({"inputs": [{**_ids([1, 1]), "data": [2**70]}, _mask([1, 1])]}).encode(),
        400,
        "input 'input_ids': values must fit in a signed 64-bit integer, found about 1.18e+21",
    ),
    (
        "integer past int64",
        json.dumps({"inputs": [{**_ids([1, 1]), "data": [2**63]}, _mask([1, 1])]}).encode(),
        400,
        "values must fit in a signed 64-bit integer, found 9223372036854775808",
    ),
    (
        # numpy makes floats of a list mixing negatives with values past int64 (it said "'f'-kind").
        "negative and past int64 together",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [[-1, 2**63]]}, _mask([1, 2])]}).encode(),
        400,
        "values must fit in a signed 64-bit integer, found 9223372036854775808",
    ),
    (
        # The value named is the one past the range, not int64's largest beside it.
        "int64's largest beside a value past it",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [[2**63 - 1, 2**63]]}, _mask([1, 2])]}).encode(),
        400,
        "values must fit in a signed 64-bit integer, found 9223372036854775808",
    ),
    (
        # orjson reads -2**63 - 1 as the float -2**63: an integer past the range, not a float sent.
        "int64's smallest beside a value past it",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [[-(2**63), -(2**63) - 1]]}, _mask([1, 2])]}).encode(),
        400,
        "input 'input_ids': values must fit in a signed 64-bit integer, found about -9.22e+18",
    ),
    (
        "a string among integers",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [1, "two"]}, _mask([1, 2])]}).encode(),
        400,
        "'data' must hold integers (INT64), found \"two\"",
    ),
    (
        "null among integers",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [[1, None]]}, _mask([1, 2])]}).encode(),
        400,
        "'data' must hold integers (INT64), found null",
    ),
    (
        "an integer of thousands of digits",
        b'{"inputs": [{"name": "input_ids", "shape": [1, 1], "datatype": "INT64", "data": ['
        + b"9" * 5000
        + b"]}, "
        + json.dumps(_mask([1, 1])).encode()
        + b"]}",
        400,
        "malformed JSON: a number has thousands of digits",
    ),
    (
        "declared INT32, value past its range",
        json.dumps({"inputs": [{**_ids([1, 2], datatype="INT32"), "data": [2**32 + 1, 7]}, _mask([1, 2])]}).encode(),
        400,
        "values must fit in INT32",
    ),
    (
        # Valid JSON (an escaped lone surrogate), but no UTF-8 response can echo it back.
        "id not valid Unicode",
        json.dumps({"id": "r\ud800", "inputs": [_ids([1, 4]), _mask([1, 4])]}).encode(),
        400,
        "'id' is not valid Unicode (lone surrogate at character 1)",
    ),
    (
        # numpy made booleans of them, then 1 and 0.
        "booleans",
        json.dumps({"inputs": [{**_ids([1, 2]), "data": [True, False]}, _mask([1, 2])]}).encode(),
        400,
        "input 'input_ids': 'data' must hold integers (INT64), found true",
    ),
    (
        # numpy made 1 of it among integers.
        "a boolean among integers",
        json.dumps({"inputs": [_ids([1, 2]), {**_mask([1, 2]), "data": [[1, False]]}]}).encode(),
        400,
        "input 'attention_mask': 'data' must hold integers (INT64), found false",
    ),
    (
        "infinite number",
        b'{"inputs": [{"name": "input_ids", "shape": [1, 1], "datatype": "INT64", "data": [1e400]}, '
        + json.dumps(_mask([1, 1])).encode()
        + b"]}",
        400,
        "'data' must hold integers (INT64), found Infinity",
    ),
]


@pytest.mark.parametrize(("case", "body", "status", "message"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_400_with_the_reason(
    live_server: LiveServer, case: str, body: bytes, status: int, message: str
) -> None:
    got, _, doc = http_json(live_server.url, "POST", INFER, body)
    assert got == status, doc
    assert message in doc["error"]


def test_unknown_model_route_and_method_get_json_errors(live_server: LiveServer) -> None:
    body = json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode()
    status, _, doc = http_json(live_server.url, "POST", "/v2/models/other/infer", body)
    assert (status, doc["error"]) == (404, "unknown model 'other'; this server serves 'minilm'")
    status, _, doc = http_json(live_server.url, "GET", "/v2/nothing-here")
    assert status == 404 and doc["error"]
    status, headers, doc = http_json(live_server.url, "GET", INFER)
    assert status == 405 and doc["error"]
    assert headers.get("Allow") == "POST"


def test_a_too_large_body_gets_413_naming_the_setting(live_server: LiveServer) -> None:
    assert live_server.state is not None
    limit = live_server.state.body_limit
    body = b'{"inputs": "' + b"x" * (limit + 1) + b'"}'
    status, _, doc = http_json(live_server.url, "POST", INFER, body)
    assert status == 413
    assert doc["error"] == f"request body larger than {limit} bytes (the server's --max-body-bytes)"


def test_the_default_limit_holds_the_largest_valid_request_at_its_widest_spelling() -> None:
    # A model compiled for 64 rows of 512 tokens: 65,536 values of two inputs, past the 1 MiB
    # floor. Each value spelled as wide as an int64 goes (-9223372036854775808), the request fits,
    # and the limit is not many times what the request can be.
    from neuronserve.emulated import BERT_BASE, synthetic_manifest
    from neuronserve.manifest import Bucket
    from neuronserve.server import MIN_BODY_BYTES, body_limit

    manifest = synthetic_manifest(BERT_BASE, "wide").model_copy(update={"buckets": [Bucket(batch=64, sequence=512)]})
    rows = [[-(2**63)] * 512] * 64
    widest = json.dumps(
        {"inputs": [{"name": s.name, "shape": [64, 512], "datatype": "INT64", "data": rows} for s in manifest.inputs]}
    ).encode()
    limit = body_limit(manifest, None)
    assert MIN_BODY_BYTES < len(widest) <= limit < 2 * len(widest)
    assert body_limit(manifest, 4096) == 4096  # --max-body-bytes, as given


@pytest.mark.parametrize("framing", ["Content-Length", "chunked", "gzip"])
def test_a_body_of_exactly_the_limit_is_served(live_server: LiveServer, framing: str) -> None:
    # The limit is the largest body accepted, not the first refused, however the body comes: its
    # length declared, chunked (counted as read), or compressed (counted decoded). JSON allows the
    # trailing blanks.
    assert live_server.state is not None
    limit = live_server.state.body_limit
    request = json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode()
    body = request + b" " * (limit - len(request))
    if framing == "chunked":
        half = len(body) // 2
        sent = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:])) + b"0\r\n\r\n"
        head = {"Transfer-Encoding": "chunked"}
    else:
        sent = gzip.compress(body) if framing == "gzip" else body
        head = {"Content-Length": str(len(sent)), **({"Content-Encoding": "gzip"} if framing == "gzip" else {})}
    answer = _raw_post(live_server.url, head, sent)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_true_elsewhere_in_the_body_does_not_refuse_integer_data(live_server: LiveServer) -> None:
    # The booleans' search only runs when the JSON holds a true or false: here one is in the
    # parameters, and the integers are still integers.
    doc = {"inputs": [_ids([1, 4]), _mask([1, 4])], "parameters": {"binary_data_output": False}, "id": "true"}
    status, _, answer = http_json(live_server.url, "POST", INFER, json.dumps(doc).encode())
    assert status == 200, answer


@pytest.mark.parametrize(
    ("shape", "data"),
    [([2, 1], ["Hello world.", "a"]), ([2, 1], [["Hello world."], ["a"]])],
    ids=["flat", "nested"],
)
def test_text_as_a_column_of_strings_equals_text_as_a_list(
    live_server: LiveServer, shape: list[int], data: list[Any]
) -> None:
    def embed(shape: list[int], data: list[Any]) -> Any:
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": shape, "data": data}]}
        status, _, doc = http_json(live_server.url, "POST", INFER, json.dumps(body).encode())
        assert status == 200, doc
        return _embedding(doc)

    np.testing.assert_array_equal(embed(shape, data), embed([2], ["Hello world.", "a"]))


@pytest.mark.parametrize(
    ("shape", "data", "message"),
    [
        ([2, 2], ["a", "b"], "shape must be [2] or [2, 1] for 2 strings, got [2, 2]"),
        ([2], [["a"], ["b"]], "'data' must be a list of strings (or, with shape [n, 1], of one-string lists)"),
        ([2, 1], [["a", "b"], ["c"]], "'data' must be a list of strings (or, with shape [n, 1], of one-string lists)"),
    ],
)
def test_text_shaped_otherwise_is_refused(
    live_server: LiveServer, shape: list[int], data: list[Any], message: str
) -> None:
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": shape, "data": data}]}
    status, _, doc = http_json(live_server.url, "POST", INFER, json.dumps(body).encode())
    assert (status, doc["error"]) == (400, f"input 'text': {message}")


def test_metrics_have_the_names_the_operator_reads(live_server: LiveServer) -> None:
    http_json(live_server.url, "POST", INFER, b"{")
    values = scrape_metrics(live_server.url)
    for name in (
        "neuronserve_queue_depth",
        "neuronserve_inflight_requests",
        "neuronserve_device_busy_ratio",
        "neuronserve_ready",
        "neuronserve_batch_size_count",
        "neuronserve_request_latency_seconds_count",
    ):
        assert name in values, name
    for outcome in ("ok", "rejected", "bad_request", "error"):
        assert f"neuronserve_requests_total{{outcome={outcome}}}" in values
    assert values["neuronserve_requests_total{outcome=bad_request}"] >= 1
    assert values["neuronserve_ready"] == 1
    assert 0 <= values["neuronserve_device_busy_ratio"] <= 1
    assert values["neuronserve_device_cores"] == 1  # a model runner executes one batch at a time
    assert values["neuronserve_queue_depth"] == 0
    assert values["neuronserve_inflight_requests"] == 0


def test_metrics_say_what_the_latency_counts_and_carry_the_process_but_no_created_series(
    live_server: LiveServer,
) -> None:
    status, _, text = http_json(live_server.url, "GET", "/metrics")
    assert status == 200
    lines = text.splitlines()
    # Only successful requests are in the histogram: an SLO must divide by requests_total.
    (help_line,) = [line for line in lines if line.startswith("# HELP neuronserve_request_latency_seconds ")]
    assert "successful" in help_line and "neuronserve_requests_total" in help_line
    bounds = [line.split('le="')[1].split('"')[0] for line in lines if "request_latency_seconds_bucket" in line]
    assert {"0.025", "0.03", "0.04", "0.05", "0.075", "0.1"} <= set(bounds)
    assert not [line for line in lines if "_created" in line]
    names = {line.split("{")[0].split()[0] for line in lines if line and not line.startswith("#")}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info"} <= names


class _AnswerlessRunner:
    """Runs the model, then hands back rows no response can be built from (a server bug)."""

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    def cost(self, rows: int, sequence: int) -> float | None:
        cost: float | None = self._runner.cost(rows, sequence)
        return cost

    def run(self, requests: Any) -> tuple[list[Any], Any]:
        return [object() for _ in requests], None


def test_a_server_failure_is_a_500_counted_as_error(live_server: LiveServer) -> None:
    from neuronserve.server import ServeConfig

    assert live_server.state is not None and live_server.state.batcher is not None
    runner = _AnswerlessRunner(live_server.state.batcher.runner)
    with LiveServer(live_server.manifest, runner, ServeConfig()) as broken:
        body = json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode()
        status, _, doc = http_json(broken.url, "POST", INFER, body)
        assert (status, doc) == (500, {"error": "internal server error"})
        values = scrape_metrics(broken.url)
        assert values["neuronserve_requests_total{outcome=error}"] == 1
        assert values["neuronserve_requests_total{outcome=ok}"] == 0


def _int32_model(manifest: Any) -> Any:
    """``manifest`` with inputs the model takes as int32 (a TorchScript source can declare so)."""
    inputs = [s.model_copy(update={"dtype": "int32", "max_value": None}) for s in manifest.inputs]
    return manifest.model_copy(update={"inputs": inputs})


def test_a_value_the_models_int32_input_cannot_hold_is_refused_whatever_the_client_declared(
    live_server: LiveServer,
) -> None:
    from neuronserve.protocol import BadRequest, parse_infer

    manifest = _int32_model(live_server.manifest)
    fits = {"inputs": [{**_ids([1, 2]), "data": [2**31 - 1, 7]}, _mask([1, 2])]}
    assert parse_infer(fits, manifest, None).arrays[0].tolist() == [[2**31 - 1, 7]]
    wraps = {"inputs": [{**_ids([1, 2]), "data": [2**32 + 1, 7]}, _mask([1, 2])]}
    with pytest.raises(BadRequest, match=r"values must fit in INT32 \(-2147483648 to 2147483647\)"):
        parse_infer(wraps, manifest, None)


def test_a_parsed_document_is_searched_for_booleans_unless_its_caller_says_the_json_had_none(
    live_server: LiveServer,
) -> None:
    # The server tells parse_infer when the body held no true or false; any other caller gets the search.
    from neuronserve.protocol import BadRequest, parse_infer

    doc = {"inputs": [{**_ids([1, 2]), "data": [True, 7]}, _mask([1, 2])]}
    with pytest.raises(BadRequest, match=r"'data' must hold integers \(INT64\), found true"):
        parse_infer(doc, live_server.manifest, None)
    assert parse_infer(doc, live_server.manifest, None, may_hold_booleans=False).arrays[0].tolist() == [[1, 7]]


def _raw_post(url: str, head: dict[str, str], body: bytes, read: bool = True, close: bool = True) -> bytes:
    """A POST written by hand: a body that does not match its headers, or is cut short.

    Read to the end of the connection: with ``close`` false the server must close it itself.
    """
    parsed = urllib.parse.urlsplit(url)
    with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 80), timeout=30) as conn:
        lines = [f"POST {INFER} HTTP/1.1", f"Host: {parsed.netloc}", "Content-Type: application/json"]
        if close:
            lines.append("Connection: close")  # the answer ends where the connection does
        lines += [f"{k}: {v}" for k, v in head.items()]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        if not read:
            return b""
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_an_undecodable_body_is_a_400_and_a_client_hanging_up_is_no_server_error(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    before = scrape_metrics(live_server.url)
    garbage = b"this is not gzip"
    with caplog.at_level(logging.ERROR):
        answer = _raw_post(live_server.url, {"Content-Encoding": "gzip", "Content-Length": str(len(garbage))}, garbage)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:200]
    assert json.loads(payload) == {
        "error": "unreadable request body: Can not decode content-encoding: gzip "
        "(Error -3 while decompressing data: incorrect header check)"
    }
    # When aiohttp decoded bodies, it re-read a failed one to discard it and logged that as an
    # unhandled exception.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []

    # Headers promise 1,000 bytes; ten come, then the client is gone.
    _raw_post(live_server.url, {"Content-Length": "1000"}, b'{"inputs":', read=False)

    def aborted() -> float:
        return scrape_metrics(live_server.url)["neuronserve_requests_total{outcome=aborted}"]

    wait_for(lambda: aborted() == before["neuronserve_requests_total{outcome=aborted}"] + 1, 10, "the abort counted")
    after = scrape_metrics(live_server.url)
    for outcome, added in (("bad_request", 1), ("error", 0), ("ok", 0)):
        key = f"neuronserve_requests_total{{outcome={outcome}}}"
        assert after[key] - before[key] == added, key


#: zstd without its library: aiohttp's parser answered it with its own text/plain 400.
UNDECODED = [
    "x-gzip",
    "gzip, deflate",
    "compress",
    *([] if "zstd" in CODINGS else ["zstd"]),
    *([] if "br" in CODINGS else ["br"]),
]


@pytest.mark.parametrize("coding", UNDECODED)
def test_a_content_coding_the_server_does_not_decode_is_a_json_415(live_server: LiveServer, coding: str) -> None:
    body = gzip.compress(json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode())
    answer = _raw_post(live_server.url, {"Content-Encoding": coding, "Content-Length": str(len(body))}, body)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 415"), answer[:200]
    assert b"Content-Type: application/json" in head
    codings = ", ".join(
        ["gzip", "deflate", *(["br"] if "br" in CODINGS else []), *(["zstd"] if "zstd" in CODINGS else [])]
    )
    assert f"Accept-Encoding: {codings}".encode() in head
    assert json.loads(payload)["error"] == (
        f"Content-Encoding {coding!r} is not supported: send the body as is, or with one of {codings}"
    )


def _compressed(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "deflate":
        return zlib.compress(data)
    if coding == "raw deflate":
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return compressor.compress(data) + compressor.flush()
    assert coding == "br"
    import brotli

    compressed: bytes = brotli.compress(data)
    return compressed


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw deflate", *(["br"] if "br" in CODINGS else [])])
def test_a_body_in_a_coding_the_server_decodes_is_served(live_server: LiveServer, coding: str) -> None:
    body = _compressed(coding, json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode())
    header = coding.split()[-1]
    answer = _raw_post(live_server.url, {"Content-Encoding": header, "Content-Length": str(len(body))}, body)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_a_gzip_body_cut_before_its_checksum_is_a_400_not_served(live_server: LiveServer) -> None:
    # Every byte of the JSON is there: only the CRC and length trailer is missing. zlib decodes
    # it without an error; the server used to serve it.
    body = gzip.compress(json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode())[:-8]
    answer = _raw_post(live_server.url, {"Content-Encoding": "gzip", "Content-Length": str(len(body))}, body)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]
    assert json.loads(payload)["error"] == (
        "unreadable request body: Can not decode content-encoding: gzip "
        "(the stream ends before its end marker (the body was cut short))"
    )


def test_a_small_body_that_decodes_past_the_limit_is_a_413(live_server: LiveServer) -> None:
    assert live_server.state is not None
    bomb = gzip.compress(b" " * (live_server.state.body_limit + 1))  # a few kB
    answer = _raw_post(live_server.url, {"Content-Encoding": "gzip", "Content-Length": str(len(bomb))}, bomb)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:200]
    assert "larger than" in json.loads(payload)["error"]


def test_a_gzip_body_is_served(live_server: LiveServer) -> None:
    body = gzip.compress(json.dumps({"inputs": [_ids([1, 4]), _mask([1, 4])]}).encode())
    answer = _raw_post(live_server.url, {"Content-Encoding": "GZIP", "Content-Length": str(len(body))}, body)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
