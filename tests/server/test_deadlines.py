import asyncio
import time

import pytest

from gtr_keras.server.deadlines import Deadlines


def test_a_wait_ends_at_its_limit_or_at_the_stop_s_end_whichever_comes_first():
    async def scenario():
        deadlines, called = Deadlines(), []
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            async with deadlines.bounded(0.1):
                await asyncio.sleep(10)
        assert 0.05 < time.monotonic() - start < 2 and not deadlines.stopped()

        async def long_wait():
            async with deadlines.bounded(60):
                await asyncio.sleep(60)

        waiting = asyncio.ensure_future(long_wait())
        await asyncio.sleep(0.05)
        start = time.monotonic()
        deadlines.stop(0.2, lambda: called.append(time.monotonic() - start))
        with pytest.raises(TimeoutError):
            await waiting  # begun before the stop, ended at its end
        assert deadlines.stopped() and 0.15 < called[0] < 2
        with pytest.raises(TimeoutError):
            async with deadlines.bounded(60):  # begun after it: ends at once
                await asyncio.sleep(60)
        deadlines.stop(5.0)  # a later stop never puts the end off
        assert deadlines.stopped()

    asyncio.run(scenario())
