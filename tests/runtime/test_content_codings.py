"""Content codings whose library is not installed get the protocol's JSON 415, like any other coding
the server does not decode: aiohttp's parser answered zstd without its library with its own
text/plain 400 before any handler ran, and br without Brotli with 400 "unreadable request body".
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

from runtime_support import ServeProcess, http_json, wait_for

BODY = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hello"]}]}).encode()


def _post(url: str, coding: str) -> tuple[int, dict[str, str], Any]:
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
    try:
        # The body is not compressed at all: a server that tried to decode it would answer 400.
        headers = {"Content-Type": "application/json", "Content-Encoding": coding}
        conn.request("POST", "/v2/models/bert-base/infer", body=BODY, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        return response.status, dict(response.getheaders()), json.loads(raw) if raw.startswith(b"{") else raw
    finally:
        conn.close()


def test_br_without_brotli_and_zstd_without_its_library_are_json_415s(serve_process: Any, tmp_path: Path) -> None:
    # A server whose Python cannot import Brotli (nor brotlicffi, nor backports.zstd): a runtime
    # image without the optional packages.
    blocked = tmp_path / "blocked"
    (blocked / "backports").mkdir(parents=True)
    for module in ("brotli.py", "brotlicffi.py", "backports/__init__.py", "backports/zstd.py"):
        (blocked / module).write_text("raise ImportError('not installed in this test')\n")
    path = os.pathsep.join(p for p in (str(blocked), os.environ.get("PYTHONPATH", "")) if p)
    process: ServeProcess = serve_process(
        ["--device", "emulated-neuroncore", "--profile", "bert-base"], env={"PYTHONPATH": path}
    )
    process.wait_listening(60)
    wait_for(lambda: http_json(process.url, "GET", "/v2/health/ready")[0] == 200, 60, "the server to be ready")

    for coding in ("br", "zstd"):
        status, headers, doc = _post(process.url, coding)
        assert status == 415, (coding, status, doc)
        assert headers["Content-Type"].startswith("application/json")
        assert headers["Accept-Encoding"] == "gzip, deflate"
        assert doc == {
            "error": f"Content-Encoding {coding!r} is not supported: send the body as is, or with one of gzip, deflate"
        }
    assert _post(process.url, "identity")[0] == 200
    assert "Traceback" not in process.log
