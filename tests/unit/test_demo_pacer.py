"""The demo's pacer survives speed changes (the compile runs at wall speed, the replay at --speed)."""

from __future__ import annotations

import asyncio

import looptime

from neuronfleet.demo.pacing import Pacer


def test_pacer_keeps_running_across_speed_changes() -> None:
    pacer = Pacer(speed=1e6)

    async def scenario() -> tuple[bool, float]:
        task = asyncio.create_task(pacer.run())
        loop = asyncio.get_running_loop()
        start = loop.time()
        for speed in (2e6, 1e6, 5e6):
            await asyncio.sleep(Pacer.STEP_S / 3)  # the pacer is mid-step when its speed changes
            pacer.set_speed(speed)
        await asyncio.sleep(10 * Pacer.STEP_S)
        alive = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return alive, loop.time() - start

    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        alive, elapsed = runner.run(scenario())
    assert alive, "the pacer task died on a speed change"
    assert pacer.speed == 5e6
    assert elapsed >= 10 * Pacer.STEP_S
