"""What the demo shows on a terminal: the live view (``render``), the progress line CI logs get
(``progress_line``), and how often ``Display`` writes either.

The fleet and the Events are given as the recorder holds them; the load is a fixed view, so each
figure on screen can be checked against what it was given.
"""

from __future__ import annotations

import functools
import io

import pytest
from manual_clock import ManualClock
from rich.console import Console, Group
from rich.text import Text

from neuronfleet.demo.recording import FleetView, Recorder
from neuronfleet.demo.terminal import Display, Frame, progress_line, render


class FixedLoad:
    """A load whose demand, queue and utilization are given; ``demand`` remembers what it was asked."""

    def __init__(self, status: str | None = None) -> None:
        self.asked: list[float] = []
        if status is not None:
            self.status = lambda: status

    def demand(self, t: float) -> float:
        self.asked.append(t)
        return 12345.0

    def queue_depth(self) -> float:
        return 678.0

    def utilization(self) -> float:
        return 0.75


def fleet() -> FleetView:
    return FleetView(
        active=3,
        ready=2,
        warm=2,
        warm_ready=1,
        placeholders=1,
        nodes_by_type={"inf2.xlarge": 2, "inf2.24xlarge": 1},
        nodes={
            "ip-10-0-0-1.ec2.internal": (
                "inf2.xlarge",
                "us-east-1a",
                [("active", True), ("active", False), ("placeholder", False), ("warm", True), ("draining", False)],
            ),
            "ip-10-0-0-2.ec2.internal": ("inf2.xlarge", "us-east-1b", []),
        },
        desired=4,
        status={"conditions": [{"type": "Ready", "status": "False", "reason": "ScalingUp"}]},
    )


def shown(renderable: object, width: int = 240) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


def test_the_simulated_view_shows_the_clock_the_load_the_fleet_and_the_events() -> None:
    load = FixedLoad()
    recorder = Recorder(load, lead_in=30.0)
    recorder.recent.appendleft(("  0.5m", "Scaled", "desired active replicas 2 -> 3: queue"))
    recorder.recent.appendleft(("  1.0m", "Scaled", "desired active replicas 3 -> 4: queue"))
    recorder.cluster_recent.appendleft(("  0.9m", "Launched", "node ip-10-0-0-2 for 1 pending pod"))
    frame = Frame("replaying the trace", 90.0, 180.0, "simulated", 1000.0, 12.4)

    text = shown(render(frame, fleet(), recorder))

    assert "neuronfleet sandbox demo: replaying the trace" in text
    assert "simulated   1.5 / 3 min" in text
    assert "speed x1000" in text and "wall    12 s" in text
    assert "load (simulated) and fleet" in text and "queue" in text and "outstanding" not in text
    # Demand is read at the replay's second: the measured second after the lead-in.
    assert load.asked == [120.0]
    row = [cell.strip() for cell in next(line for line in text.splitlines() if "12,345" in line).split("│")]
    assert row[1:-1] == ["12,345", "678", "75%", "4", "3", "2", "1/2", "1", "3"], row
    # Pods per node: upper case when ready (a placeholder always), lower case while starting.
    assert "ip-10-0-0-1 inf2.xlarge 1a [AaPWd]" in text
    assert "ip-10-0-0-2 inf2.xlarge 1b [-   ]" in text
    # The operator's Events newest first; the cluster's apart.
    assert text.index("3 -> 4") < text.index("2 -> 3")
    assert "0.9m Launched: node ip-10-0-0-2 for 1 pending pod" in text
    assert "Ready=False(ScalingUp)" in text


def test_the_real_view_says_wall_time_outstanding_requests_and_the_clients_status() -> None:
    recorder = Recorder(FixedLoad(status="client: 640 req/s sent, 3 outstanding"))
    frame = Frame("serving real requests", -15.0, 45.0, "real", 1.0, 80.0)

    text = shown(render(frame, FleetView(), recorder))

    assert "wall  -0.2 / 1 min" in text and "simulated" not in text
    assert "load (real requests, measured at the client)" in text and "outstanding" in text
    assert "client: 640 req/s sent, 3 outstanding" in text


def test_the_progress_line_reads_the_same_figures() -> None:
    load = FixedLoad()
    recorder = Recorder(load, lead_in=60.0)
    simulated = progress_line(Frame("lead-in (not measured)", -30.0, 180.0, "simulated", 1.0, 1.0), fleet(), recorder)
    assert load.asked == [30.0]
    assert simulated == (
        "[ -0.5 min] lead-in (not measured): demand  12,345 req/s (simulated), queue    678, desired 4, "
        "active 3 (ready 2), warm 1/2, placeholders 1, nodes 3"
    )
    real = progress_line(Frame("serving", 0.0, 45.0, "real", 1.0, 1.0), fleet(), recorder)
    assert "(real), outstanding at the client    678," in real


def test_without_a_terminal_a_line_is_written_each_minute_of_the_runs_clock() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    display = Display(console, live=False)
    with display:
        for t in (0.0, 30.0, 59.9, 60.0, 100.0, 120.0):
            display.update(render_never, functools.partial("line at {:g}".format, t), t)
        display.update(render_never, lambda: "the last line", 125.0, force=True)
    assert console.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "line at 0",
        "line at 60",
        "line at 120",
        "the last line",
    ]


def test_on_a_terminal_the_view_is_redrawn_at_most_four_times_a_second_unless_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock(100.0)
    monkeypatch.setattr("neuronfleet.demo.terminal.time", clock)
    drawn: list[float] = []

    def make() -> Group:
        drawn.append(clock.now)
        return Group(Text(f"frame at {clock.now:g}"))

    display = Display(Console(file=io.StringIO(), width=80, force_terminal=True), live=True)
    with display:
        for now, force in ((100.0, False), (100.1, False), (100.24, False), (100.25, False), (100.3, True)):
            clock.now = now
            display.update(make, lambda: "no line on a terminal", 0.0, force)
    assert drawn == [100.0, 100.25, 100.3]


def render_never() -> Group:
    raise AssertionError("no live view without a terminal")


class ClosedTerminal(io.StringIO):
    """A terminal hung up: every write fails with EIO; the texts tried are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.tried: list[str] = []

    def write(self, text: str) -> int:
        self.tried.append(text)
        raise OSError(5, "Input/output error")


def test_writes_to_a_closed_terminal_are_dropped() -> None:
    terminal = ClosedTerminal()
    display = Display(Console(file=terminal, width=80), live=False)
    with display:
        display.note("a note nobody reads")
        display.update(render_never, lambda: "a line nobody reads", 0.0)
    # Both were written (and failed) without the EIO reaching the demo.
    assert "a note nobody reads" in "".join(terminal.tried)
    assert "a line nobody reads" in "".join(terminal.tried)
