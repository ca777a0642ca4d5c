"""Request-body content codings the model server decodes: gzip, deflate, br and zstd.

The server decodes bodies itself (see ``server.app_runner`` for why not aiohttp). This module does
it with the codecs' own libraries rather than aiohttp's decompressor wrappers because a body must be
checked whole: a gzip stream cut before its trailer decodes to the full text without an error, so
only the codec's end-of-stream flag tells a truncated body (its checksum never verified) from a
complete one, and aiohttp's wrappers reset that flag to be ready for a next chunk.

:func:`decode_body` answers the decoded bytes (at most ``limit + 1`` of them: a small body can
decode to gigabytes) or raises :class:`Undecodable`.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any, Protocol

#: A body with more members or frames than this is refused: each costs a decoder, and clients send one.
MAX_MEMBERS = 64


class Undecodable(ValueError):
    """The body is not a whole stream of its coding (corrupt, cut short, or trailed by garbage)."""


class _StreamDecoder(Protocol):
    """zlib's decompress object and zstd's ZstdDecompressor share this shape."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _optional(module: str, *names: str) -> Any:
    """The first of ``names`` importable from ``module`` (None when it is not installed)."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    return next((getattr(found, name) for name in names if hasattr(found, name)), None)


_BROTLI = _optional("brotli", "Decompressor")
# Python 3.14's compression.zstd, or its backport (what aiohttp decodes zstd with).
_ZSTD = _optional("compression.zstd", "ZstdDecompressor") or _optional("backports.zstd", "ZstdDecompressor")

#: The codings this process can decode, in the order they are offered to clients.
CODINGS: tuple[str, ...] = ("gzip", "deflate") + (("br",) if _BROTLI else ()) + (("zstd",) if _ZSTD else ())


def _members(raw: bytes, new_decoder: Callable[[], _StreamDecoder], limit: int, *, concatenated: bool) -> bytes:
    """Decode ``raw`` as one stream (or, ``concatenated``, one or more streams back to back)."""
    out: list[bytes] = []
    size, data = 0, raw
    for _ in range(MAX_MEMBERS):
        decoder = new_decoder()
        chunk = decoder.decompress(data, limit + 1 - size)
        out.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(out)  # the caller refuses it as too large: no need to decode more
        if not decoder.eof:
            raise Undecodable("the stream ends before its end marker (the body was cut short)")
        data = decoder.unused_data
        if not data:
            return b"".join(out)
        if not concatenated:
            raise Undecodable("data follows the end of the stream")
    raise Undecodable(f"more than {MAX_MEMBERS} concatenated streams")


def _brotli(raw: bytes, limit: int) -> bytes:
    decoder = _BROTLI()
    body: bytes = decoder.process(raw, output_buffer_limit=limit + 1)
    if len(body) > limit:
        return body
    if not decoder.is_finished():
        raise Undecodable("the stream ends before its end marker (the body was cut short)")
    return body


def decode_body(raw: bytes, coding: str, limit: int) -> bytes:
    """``raw`` decoded from ``coding`` (one of :data:`CODINGS`), at most ``limit + 1`` bytes of it.

    Raises :class:`Undecodable` for a body that is not one whole stream: corrupt, truncated (also
    when every byte of the text is there but the checksum trailer is not), or followed by garbage.
    gzip and zstd bodies may be several streams back to back (RFC 1952, RFC 8878); an empty body
    decodes to an empty one, as an empty body with no coding would be.
    """
    if not raw:
        return b""
    try:
        if coding == "gzip":
            return _members(raw, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), limit, concatenated=True)
        if coding == "deflate":
            # RFC 9110's deflate is zlib-wrapped; some clients send raw deflate, which aiohttp took too.
            wbits = zlib.MAX_WBITS if raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
            return _members(raw, lambda: zlib.decompressobj(wbits), limit, concatenated=False)
        if coding == "br" and _BROTLI is not None:
            return _brotli(raw, limit)
        if coding == "zstd" and _ZSTD is not None:
            return _members(raw, _ZSTD, limit, concatenated=True)
    except Undecodable:
        raise
    except Exception as exc:  # zlib.error, brotli.error, ZstdError: all the client's body
        raise Undecodable(str(exc)) from None
    raise Undecodable(f"content coding {coding!r} is not decoded here")
