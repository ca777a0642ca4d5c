"""How fast the sandbox demo can run here: simulated seconds per wall second with the pacer out of the way.

Runs ``neuronfleet demo`` (the sandbox, the real operator, the trace replay) for a slice of the
default trace with the compile skipped and ``--speed`` far above what the machine reaches, so the
loop runs as fast as the CPU lets it. The achieved speed is the ceiling for ``--speed``: above it
the demo simply runs slower than asked. Also records the figures of the run (pods, events).

    .venv/bin/python bench/bench_demo.py [--minutes 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console

from _common import write_result
from neuronfleet.demo.options import DEFAULT_TRACE, DemoOptions
from neuronfleet.demo.orchestration import run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--start-minute", type=float, default=22.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as scratch:
        wall = time.perf_counter()
        cpu = time.process_time()
        result = run_demo(
            DemoOptions(
                minutes=args.minutes,
                start_minute=args.start_minute,
                lead_in_minutes=3.0,
                speed=1e6,
                out=Path(scratch),
                live=False,
                skip_compile=True,
            ),
            Console(file=open(Path(scratch) / "console.txt", "w")),  # noqa: SIM115 - closed with the folder
        )
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
    simulated = (args.minutes + 3.0) * 60.0
    figures: dict[str, float | int | str | None] = {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "replay_wall_s": round(result.replay_wall_s, 2),
        "max_speed_sim_s_per_wall_s": round(simulated / result.replay_wall_s, 1),
        "peak_active": result.peak_active,
        "scale_events": result.scale_events,
        "requests_simulated": round(result.requests),
    }
    path = write_result(
        "demo",
        {"trace": str(DEFAULT_TRACE), "minutes": args.minutes, "lead_in_minutes": 3.0, "skip_compile": True},
        figures,
    )
    print(f"{path}: {figures}")


if __name__ == "__main__":
    main()
