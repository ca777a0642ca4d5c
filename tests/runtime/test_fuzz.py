"""Property-based fuzzing of the infer endpoint: whatever arrives, the answer is never a 5xx.

Three generators: arbitrary bytes, arbitrary JSON documents, and near-valid v2 requests whose
names, datatypes, shapes and data are perturbed (the interesting boundary of the validator).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime_support import MODEL_NAME, LiveServer, http_json

INFER = f"/v2/models/{MODEL_NAME}/infer"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=10), children, max_size=6),
    max_leaves=40,
)
names = st.sampled_from(["input_ids", "attention_mask", "text", "", "other"])
datatypes = st.sampled_from(["INT64", "INT32", "FP32", "BYTES", "BOOL", "int64", None])
dims = st.integers(min_value=-2, max_value=140)
shapes = st.lists(dims, min_size=0, max_size=3) | json_values
scalars = (
    st.integers(min_value=-5, max_value=30525)
    | st.integers()
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.text(max_size=5)
)
flat_data = st.lists(scalars, max_size=300)
nested_data = st.lists(st.lists(st.integers(min_value=0, max_value=30521), max_size=40), max_size=6)


@st.composite
def tensors(draw: st.DrawFn) -> dict[str, Any]:
    tensor: dict[str, Any] = {
        "name": draw(names),
        "datatype": draw(datatypes),
        "shape": draw(shapes),
        "data": draw(flat_data | nested_data | json_values),
    }
    for key in draw(st.sets(st.sampled_from(list(tensor)), max_size=2)):
        del tensor[key]
    return tensor


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(st.integers(min_value=1, max_value=5))
    seq = draw(st.integers(min_value=1, max_value=130))
    ids = draw(st.lists(st.integers(min_value=0, max_value=30521), min_size=rows * seq, max_size=rows * seq))
    mask = draw(st.lists(st.integers(min_value=0, max_value=1), min_size=rows * seq, max_size=rows * seq))
    inputs = [
        {"name": "input_ids", "shape": [rows, seq], "datatype": "INT64", "data": ids},
        {"name": "attention_mask", "shape": [rows, seq], "datatype": "INT64", "data": mask},
    ]
    extra = draw(st.lists(tensors(), max_size=2))
    doc: dict[str, Any] = {"inputs": draw(st.permutations(inputs + extra))}
    if draw(st.booleans()):
        doc["id"] = draw(json_values)
    return doc


bodies = (
    st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.builds(lambda ts: json.dumps({"inputs": ts}).encode(), st.lists(tensors(), max_size=3))
    | near_valid().map(lambda d: json.dumps(d).encode())
)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(body=bodies)
def test_infer_never_answers_5xx(live_server: LiveServer, body: bytes) -> None:
    status, _, doc = http_json(live_server.url, "POST", INFER, body)
    assert status < 500, (status, doc)
    if status == 200:
        (output,) = doc["outputs"]
        assert output["shape"][1] == 384
        assert len(output["data"]) == output["shape"][0] * 384
    else:
        assert status in (400, 413, 429), (status, doc)
        assert isinstance(doc["error"], str) and doc["error"]


@st.composite
def binary_requests(draw: st.DrawFn) -> tuple[bytes, str]:
    """Near-valid binary tensor requests: sizes, header lengths, datatypes and blobs perturbed."""
    rows = draw(st.integers(min_value=1, max_value=5))
    seq = draw(st.integers(min_value=1, max_value=130))
    datatype = draw(st.sampled_from(["INT64", "INT32", "BYTES", "FP32"]))
    itemsize = 4 if datatype == "INT32" else 8
    inputs: list[dict[str, Any]] = []
    blob = b""
    for name in draw(st.sampled_from([["input_ids", "attention_mask"], ["attention_mask"], ["text"]])):
        size = rows * seq * itemsize
        size = draw(st.sampled_from([size, size - 1, size + 8, 0, 4]))
        inputs.append(
            {"name": name, "shape": [rows, seq], "datatype": datatype, "parameters": {"binary_data_size": size}}
        )
        blob += draw(st.binary(min_size=max(0, size - 4), max_size=size + 4))
    doc: dict[str, Any] = {"inputs": inputs}
    if draw(st.booleans()):
        doc["parameters"] = {"binary_data_output": draw(json_values)}
    if draw(st.booleans()):
        doc["outputs"] = [{"name": draw(st.sampled_from(["embedding", "x"])), "parameters": draw(json_values)}]
    header = json.dumps(doc).encode()
    length = draw(st.sampled_from([len(header), len(header) - 1, len(header) + 3, 0]))
    return header + blob, str(length) if draw(st.integers(0, 9)) else "not-a-number"


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=binary_requests())
def test_binary_infer_never_answers_5xx(live_server: LiveServer, request: tuple[bytes, str]) -> None:
    import http.client
    import urllib.parse

    body, header_length = request
    parsed = urllib.parse.urlsplit(live_server.url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
    try:
        conn.request("POST", INFER, body=body, headers={"Inference-Header-Content-Length": header_length})
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    assert response.status < 500, (response.status, payload[:300])
    if response.status != 200:
        assert response.status in (400, 413, 429), (response.status, payload[:300])
        assert json.loads(payload)["error"]
