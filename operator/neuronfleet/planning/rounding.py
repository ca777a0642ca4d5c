"""Whole numbers from float arithmetic (pure): a value a round-off above a whole number is that number.

Replica needs, whole seconds and bin counts are worked out from sums and quotients of floats: seven
replicas of work summed from 100 bins of 0.07 s is 7.0000000000000036, and a plain ``ceil`` asks
for an eighth replica. The autoscaler, the simulator's engine, its baselines and its oracles all
round up through :func:`ceil_whole` (the oracle's arrays with the same :data:`ROUND_OFF`), so they
read the same value as the same count; the simulator's bin of a time rounds down with the same
tolerance, added.
"""

from __future__ import annotations

import math

#: How far above a whole number a float may land by round-off alone and still be read as it. Far
#: below any quantity rounded here (a replica's work, a second, a bin of 0.1 s), far above the
#: round-off of the sums that produce them (about 1e-15 per term).
ROUND_OFF = 1e-9


def ceil_whole(value: float) -> int:
    """The least whole number not below ``value``, reading a value within :data:`ROUND_OFF` above a
    whole number as that number."""
    return math.ceil(value - ROUND_OFF)


__all__ = ["ROUND_OFF", "ceil_whole"]
