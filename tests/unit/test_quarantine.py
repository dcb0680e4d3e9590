"""A suspect step runs alone in its worker (`tether.worker.quarantine`): it waits for the
steps running beside it, and none starts while it runs or waits."""

from __future__ import annotations

import asyncio

from tether.worker.quarantine import Quarantine


async def test_ordinary_steps_run_side_by_side_without_waiting() -> None:
    quarantine = Quarantine()
    async with quarantine.beside(), quarantine.beside():
        assert quarantine.busy


async def test_a_suspect_waits_for_the_steps_beside_it_and_runs_with_none() -> None:
    quarantine, log = Quarantine(), []
    release = asyncio.Event()

    async def ordinary(name: str, hold: asyncio.Event | None = None) -> None:
        async with quarantine.beside():
            log.append(f"{name} starts")
            if hold is not None:
                await hold.wait()
            log.append(f"{name} ends")

    async def suspect(name: str) -> None:
        async with quarantine.alone():
            log.append(f"{name} alone")
            await asyncio.sleep(0.01)
            log.append(f"{name} done")

    first = asyncio.create_task(ordinary("a", release))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(suspect("s1")), asyncio.create_task(suspect("s2"))]
    await asyncio.sleep(0)
    late = asyncio.create_task(ordinary("b"))  # came after the suspects: waits for them
    await asyncio.sleep(0.01)
    assert log == ["a starts"]
    release.set()
    await asyncio.wait_for(asyncio.gather(first, late, *waiting), 5)
    assert log[:2] == ["a starts", "a ends"]
    suspects = log[2:6]
    assert suspects in (
        ["s1 alone", "s1 done", "s2 alone", "s2 done"],
        ["s2 alone", "s2 done", "s1 alone", "s1 done"],
    )
    assert log[6:] == ["b starts", "b ends"]
    assert not quarantine.busy


async def test_a_suspect_cancelled_while_it_waits_leaves_the_worker_free() -> None:
    quarantine = Quarantine()
    hold = asyncio.Event()

    async def ordinary() -> None:
        async with quarantine.beside():
            await hold.wait()

    running = asyncio.create_task(ordinary())
    await asyncio.sleep(0)

    async def suspect() -> None:
        async with quarantine.alone():
            pass

    waiting = asyncio.create_task(suspect())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    hold.set()
    await running
    async with quarantine.beside():  # does not wait for the cancelled suspect
        pass
    assert not quarantine.busy
