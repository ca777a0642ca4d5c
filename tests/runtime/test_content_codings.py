"""Content codings: those whose library is not installed get the protocol's JSON 415, like any
other coding the server does not decode (aiohttp's parser answered zstd without its library with
its own text/plain 400 before any handler ran, and br without Brotli with 400 "unreadable request
body"); those it decodes are decoded only as whole streams (a gzip body cut before its checksum
decoded to the whole text and was served).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import urllib.parse
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronserve.codings import CODINGS, MAX_MEMBERS, Undecodable, decode_body
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


# ------------------------------------------------------------------ whole streams (decode_body)


def _brotli_compress(data: bytes) -> bytes:
    import brotli

    compressed: bytes = brotli.compress(data)
    return compressed


TEXT = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hello"] * 50}]}).encode()


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


ENCODERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "deflate": ("deflate", zlib.compress),
    "raw deflate": ("deflate", _raw_deflate),
    **({"br": ("br", _brotli_compress)} if "br" in CODINGS else {}),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_a_whole_stream_decodes_to_its_text(name: str) -> None:
    coding, encode = ENCODERS[name]
    assert decode_body(encode(TEXT), coding, len(TEXT)) == TEXT
    assert decode_body(b"", coding, 10) == b""


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_a_stream_cut_short_is_undecodable_even_when_the_text_is_all_there(name: str) -> None:
    # gzip's last 8 bytes are its CRC and length: cut there, zlib hands the whole text back
    # without an error, and the server used to serve a body whose checksum it never saw.
    coding, encode = ENCODERS[name]
    whole = encode(TEXT)
    for cut in (1, 4, 8, len(whole) // 2):
        with pytest.raises(Undecodable, match=r"cut short|Error"):
            decode_body(whole[:-cut], coding, len(TEXT))


@pytest.mark.skipif("br" not in CODINGS, reason="the brotli library is not installed")
def test_a_brotli_stream_flushed_but_not_finished_is_cut_short_even_at_exactly_the_limit() -> None:
    # A flushed brotli stream carries the whole text before its last (empty) meta-block: a body
    # cut there decodes to every byte, and only the end marker tells it is not whole. At exactly
    # the limit the size check must not answer before that check does.
    import brotli

    compressor = brotli.Compressor()
    flushed = compressor.process(TEXT) + compressor.flush()
    whole = flushed + compressor.finish()
    assert decode_body(whole, "br", len(TEXT)) == TEXT
    with pytest.raises(Undecodable, match="cut short"):
        decode_body(flushed, "br", len(TEXT))


def test_concatenated_gzip_members_decode_and_garbage_after_a_stream_does_not() -> None:
    assert decode_body(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"
    with pytest.raises(Undecodable, match="follows the end"):
        decode_body(zlib.compress(b"ab") + b"trailing", "deflate", 10)
    with pytest.raises(Undecodable):
        decode_body(gzip.compress(b"ab") + b"trailing", "gzip", 10)
    with pytest.raises(Undecodable, match=f"more than {MAX_MEMBERS}"):
        decode_body(gzip.compress(b"a") * (MAX_MEMBERS + 1), "gzip", 1000)


def test_decoding_stops_one_byte_past_the_limit() -> None:
    bomb = gzip.compress(b" " * 10_000_000)
    assert len(decode_body(bomb, "gzip", 1000)) == 1001
    assert len(decode_body(gzip.compress(b"a" * 600) * 2, "gzip", 1000)) == 1001
