"""Telling a failed device from requests the model cannot run: the state behind readiness and liveness.

A request the model raises on is retried alone (the batcher splits a failing batch), so one bad
input costs that request only and the others of its batch succeed. A failed device (an NRT error, a
NeuronCore that stopped answering) makes every request fail alone, which looked the same, request by
request (with several copies of the model, one per NeuronCore, the runner first runs a failed batch
again on another copy and takes a copy that alone keeps failing out of rotation, see
``neuronserve.backend``: what reaches here failed on every copy in rotation, so failed cores
with a sound one left never end here, and all of them failed does). The sign is a run:
``suspect_after`` requests in a row failed alone with no success between them. The server then runs
a request known to be good (the warm-up input, which ran at start in every bucket) through the
batcher, at the shape of the last request that failed alone (so in its bucket): if it fails too, the
device has failed (``failed``): the server reports not ready and counts further failures as errors,
and runs that check again every ``SELF_TEST_SECONDS``; once the device has been failed
``restart_after`` seconds it reports not live, so that the kubelet restarts the process (the Neuron
runtime initializes the device again at start). Any request that succeeds, a check included, ends
the run. The failure ends only after ``recover_after`` successes in a row (by default as many as
``suspect_after``): a device that fails most requests and not all (an intermittent NRT fault) has
isolated successes, and ending the failure on each made readiness flap and restarted the liveness
clock, so the process was never restarted. After a check succeeds, the server checks again at once
until the device has recovered or fails.

Pure state with a clock: the server's event loop calls it; no I/O here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: How often a failed device is checked again with the known-good request.
SELF_TEST_SECONDS = 5.0


class DeviceHealth:
    """Consecutive requests that failed alone, and since when the device has been failed."""

    def __init__(
        self,
        suspect_after: int,
        restart_after: float,
        clock: Callable[[], float] = time.monotonic,
        recover_after: int | None = None,
    ) -> None:
        self.suspect_after = suspect_after
        self.restart_after = restart_after
        self.recover_after = suspect_after if recover_after is None else recover_after
        self._clock = clock
        self.run = 0  # requests failed alone since the last success
        self.successes = 0  # successes in a row since the device failed
        self.failed_since: float | None = None

    @property
    def failed(self) -> bool:
        return self.failed_since is not None

    def failed_alone(self) -> bool:
        """A request failed alone; True when the run is long enough to check the device."""
        self.run += 1
        self.successes = 0
        return self.run >= self.suspect_after

    def succeeded(self) -> bool:
        """A request succeeded: the run ends; True if the device had been failed and this is the
        ``recover_after``-th success in a row (it recovered)."""
        self.run = 0
        if self.failed_since is None:
            return False
        self.successes += 1
        if self.successes < self.recover_after:
            return False  # an isolated success: still failed, the liveness clock runs on
        self.failed_since = None
        self.successes = 0
        return True

    def self_test_failed(self) -> bool:
        """The known-good request failed too: the device has failed. True if it just did."""
        self.successes = 0
        if self.failed_since is not None:
            return False
        self.failed_since = self._clock()
        return True

    def live(self) -> bool:
        """False once the device has been failed ``restart_after`` seconds: restart the process."""
        return self.failed_since is None or self._clock() - self.failed_since < self.restart_after
