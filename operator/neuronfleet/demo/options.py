"""The demo's options, constants and the trace it replays by default.

The default trace ships with the package (``neuronfleet/data``, with its CC-BY attribution), so a
plain clone or an installed wheel runs the demo with no file from outside the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neuronfleet.sandbox import ColdStartProfile

PACKAGE = Path(__file__).resolve().parents[1]
#: The project's checkout (examples/, crds/), when the package runs from one.
REPO = PACKAGE.parents[1]
DEFAULT_TRACE = PACKAGE / "data" / "azure-llm-2023-conv.csv"
DEFAULT_EXAMPLE = REPO / "examples" / "bert-embeddings.yaml"
TRACE_ATTRIBUTION = (
    "Trace: Azure LLM inference trace 2023 (conversation), Azure/AzurePublicDataset, Microsoft, CC-BY 4.0. "
    'Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.'
)
NEURON_SCHEDULER = "neuron-scheduler"
#: Emulated start-up of a serving pod on an inf2 node (image pull, runtime init, artifact load and
#: warm-up): shortened from FACTS.md's minutes so a 20-minute replay shows several scale-ups.
DEMO_COLD_START = ColdStartProfile(
    image_pull_s=40.0, container_start_s=3.0, readiness_s=15.0, shutdown_s=2.0, jitter=0.2
)
DEMO_PROVISIONING_S = 75.0
#: Buckets small enough for a CPU compile of all-MiniLM-L6-v2 in well under a minute here. Batch 1 only:
#: the live part slows every emulated batch x8 (see demo.live), and a batch of 4 would then take
#: 23.6 ms, so a request waiting for one to finish before its own would miss the 50 ms SLO.
DEMO_BATCH_BUCKETS = [1]
DEMO_SEQUENCE_BUCKETS = [32]
SAMPLE_EVERY_S = 5.0
WAIT_FOR_COMPILE_S = 900.0
WAIT_FOR_READY_S = 900.0


class DemoError(Exception):
    """A demo that cannot start or went wrong, with a message for the console."""


class DemoStopped(DemoError):
    """The demo was stopped by a signal (Ctrl-C, ``kill``, a closed terminal) before its end."""

    def __init__(self, signal_name: str, signal_number: int) -> None:
        super().__init__(
            f"stopped by {signal_name} before its end: the sandbox, the operator and their processes are stopped; "
            "no report was written"
        )
        #: The process' exit status, as a shell reports a command a signal ended: 128 + its number.
        self.exit_status = 128 + signal_number


def default_trace() -> Path:
    """The trace shipped with the package; a clear error if an install lost it."""
    if not DEFAULT_TRACE.is_file():
        raise DemoError(
            f"the demo's default trace {DEFAULT_TRACE} is missing from this install (package data of "
            "neuronfleet): reinstall the package, or give a trace with --trace"
        )
    return DEFAULT_TRACE


#: The live part's default slice of the default trace: a rise to its busiest 30 s at minute 36,
#: then a drop by a third at minute 37 that lasts (a scale-up, then a scale-down).
LIVE_START_MINUTE = 34.0
LIVE_MINUTES = 5.5


@dataclass
class DemoOptions:
    #: ``real``: requests from a client to real servers in real time (:mod:`neuronfleet.demo.live`);
    #: ``simulated``: the simulator's queue in compressed time.
    load: str = "real"
    #: None: the trace shipped with the package (:func:`default_trace`).
    trace: Path | None = None
    minutes: float = 20.0
    speed: float = 10.0
    example: Path = DEFAULT_EXAMPLE
    out: Path = Path("demo-out")
    live: bool = True
    skip_compile: bool = False
    #: Replicas the busiest minute of the replayed slice needs at full throughput.
    peak_replicas: float = 9.0
    #: Minutes 22-42 of the default trace hold its busiest stretch and the drop after it.
    start_minute: float = 22.0
    #: Minutes of the trace before ``start_minute`` replayed first and left out of the figures: the
    #: fleet meets the measured span sized by the operator for the traffic, not at minReplicas.
    lead_in_minutes: float = 3.0
    seed: int = 0
    #: Real load: the trace slice (real time), its busiest 30 s scaled to ``peak_rps`` by
    #: superposing copies, each shifted by a seeded offset within ``offset_window_s``.
    live_start_minute: float = LIVE_START_MINUTE
    live_minutes: float = LIVE_MINUTES
    peak_rps: float = 360.0
    offset_window_s: float = 30.0

    @property
    def trace_path(self) -> Path:
        return self.trace if self.trace is not None else default_trace()
