"""A clock the test moves by hand: a cool-off, a back-off or a redraw interval passes without
waiting it out. Call it (a ``clock=`` argument), or put it where a module reads ``time.monotonic``."""

from __future__ import annotations


class ManualClock:
    """Reads ``now`` until the test sets another."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now
