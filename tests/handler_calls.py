"""Calling the operator's Kopf handlers directly, as the unit tests do.

Kopf's decorators type a handler as Kopf's callback protocol, which takes every keyword Kopf
passes (``body``, ``spec``, ``meta``, ``logger``...). A handler reads a few of them and takes the
rest as ``**_``, so a test passes only those it reads; this gives the handler back as what it is at
run time, a coroutine function of keywords.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import kopf


def as_called(handler: object) -> Callable[..., Awaitable[Any]]:
    """``handler`` as a coroutine function taking any keywords (what Kopf's decorator returned)."""
    return cast(Callable[..., Awaitable[Any]], handler)


def kopf_body(raw: dict[str, Any]) -> kopf.Body:
    """A Kopf body from a plain dict (Kopf types its argument as its own TypedDicts)."""
    return kopf.Body(cast(kopf.RawBody, raw))
