"""The demo's terminal: a rich live view on a terminal, a progress line a minute otherwise (CI logs)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from neuronfleet.demo.recording import FleetView, Recorder


@dataclass(frozen=True)
class Frame:
    """What one refresh shows besides the fleet: where the run is and how its load is made."""

    phase: str
    #: Measured seconds (negative during a lead-in) and the measured span's length.
    t: float
    total_s: float
    #: ``simulated`` (compressed-time replay) or ``real`` (requests from a client, wall time).
    load: str
    speed: float
    wall_s: float


def render(frame: Frame, view: FleetView, recorder: Recorder) -> Group:
    """The live view: clock, load, the fleet, pods per node, recent events, conditions."""
    head = Table.grid(padding=(0, 2))
    clock = "simulated" if frame.load == "simulated" else "wall"
    head.add_row(
        Text(f"neuronfleet sandbox demo: {frame.phase}", style="bold"),
        Text(f"{clock} {frame.t / 60:5.1f} / {frame.total_s / 60:.0f} min", style="cyan"),
        Text(f"speed x{frame.speed:g}", style="dim"),
        Text(f"wall {frame.wall_s:5.0f} s", style="dim"),
    )
    title = (
        "load (simulated) and fleet (operator on the emulated cluster)"
        if frame.load == "simulated"
        else "load (real requests, measured at the client) and fleet (operator on the emulated cluster)"
    )
    load = Table(title=title, expand=True)
    waiting = "queue" if frame.load == "simulated" else "outstanding"
    for column in ("demand req/s", waiting, "util", "desired", "active", "ready", "warm", "placeholders", "nodes"):
        load.add_column(column, justify="right")
    load.add_row(
        f"{recorder.load.demand(frame.t + recorder.lead_in):,.0f}",
        f"{recorder.load.queue_depth():,.0f}",
        f"{recorder.load.utilization():.0%}",
        str(view.desired),
        str(view.active),
        str(view.ready),
        f"{view.warm_ready}/{view.warm}",
        str(view.placeholders),
        str(sum(view.nodes_by_type.values())),
    )
    glyph = {"active": "A", "warm": "W", "draining": "D", "placeholder": "P"}
    cells = []
    for name, (itype, zone, pods) in sorted(view.nodes.items()):
        marks = "".join(glyph.get(r, "?") if ok or r == "placeholder" else glyph.get(r, "?").lower() for r, ok in pods)
        cells.append(Text(f"{name.split('.')[0]} {itype} {zone[-2:]} [{marks or '-':<4}]"))
    nodes = Panel(
        Columns(cells, padding=(0, 3)),
        title="pods per node: A active, W warm, D draining, P placeholder (lower case: starting)",
    )
    events = Table(title="the operator's Events (newest first)", expand=True)
    events.add_column("when", no_wrap=True, min_width=6)
    events.add_column("reason", no_wrap=True, min_width=18)
    events.add_column("message", overflow="ellipsis", no_wrap=True)
    for stamp, reason, message in recorder.recent:
        events.add_row(stamp, reason, message[:160])
    cluster_events = Text(
        "\n".join(f"{stamp} {reason}: {message[:120]}" for stamp, reason, message in recorder.cluster_recent),
        style="dim",
    )
    conds = Text(
        "  ".join(
            f"{c.get('type')}={c.get('status')}({c.get('reason', '')})" for c in view.status.get("conditions") or []
        ),
        style="dim",
    )
    status = getattr(recorder.load, "status", None)
    client = Text(status() if callable(status) else "", style="cyan")
    return Group(
        head,
        load,
        client,
        nodes,
        events,
        Panel(cluster_events, title="cluster events"),
        Panel(conds, title="conditions"),
    )


def progress_line(frame: Frame, view: FleetView, recorder: Recorder) -> str:
    """One progress line; ``frame.t`` in measured seconds (negative during the lead-in)."""
    demand = recorder.load.demand(frame.t + recorder.lead_in)
    waiting = "queue" if frame.load == "simulated" else "outstanding at the client"
    return (
        f"[{frame.t / 60:5.1f} min] {frame.phase}: demand {demand:7,.0f} req/s ({frame.load}), "
        f"{waiting} {recorder.load.queue_depth():6,.0f}, desired {view.desired}, active {view.active} "
        f"(ready {view.ready}), warm {view.warm_ready}/{view.warm}, placeholders {view.placeholders}, "
        f"nodes {sum(view.nodes_by_type.values())}"
    )


class Display:
    """The rich live view, or a line every minute (of the run's clock) when not live (CI logs).

    Its writes are best effort: once the terminal is closed every write fails (EIO), and the demo
    must still unwind cleanly on the SIGHUP that follows (its operator and sandbox stopped).
    """

    def __init__(self, console: Console, live: bool) -> None:
        self.console = console
        self.live: Live | None = Live(console=console, auto_refresh=False) if live else None
        self._last_refresh = 0.0
        self._last_line_t: float | None = None

    def __enter__(self) -> Display:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            with contextlib.suppress(OSError):  # its last frame, to a closed terminal
                self.live.__exit__(None, None, None)

    def note(self, message: str) -> None:
        with contextlib.suppress(OSError):
            self.console.print(message)

    def update(self, make: Callable[[], Group], line: Callable[[], str], t: float, force: bool = False) -> None:
        if self.live is not None:
            now = time.monotonic()
            if force or now - self._last_refresh >= 0.25:
                self._last_refresh = now
                with contextlib.suppress(OSError):
                    self.live.update(make(), refresh=True)
            return
        if force or self._last_line_t is None or t - self._last_line_t >= 60.0:
            self._last_line_t = t
            with contextlib.suppress(OSError):
                self.console.print(line())
