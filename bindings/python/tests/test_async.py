import asyncio

import pytest

from test_model import LONG, wait_idle


def run(coro):
    return asyncio.run(coro)


def test_agenerate_and_astream(tiny):
    expected = tiny.generate("hello", max_tokens=6, ignore_eos=True)

    async def main():
        text = await tiny.agenerate("hello", max_tokens=6, ignore_eos=True)
        events = [ev async for ev in tiny.astream("hello", max_tokens=6, ignore_eos=True)]
        chat = await tiny.achat([{"role": "user", "content": "hi"}], max_tokens=3)
        return text, events, chat

    text, events, chat = run(main())
    assert text == expected
    assert "".join(e.text for e in events) == expected and events[-1].eos
    assert isinstance(chat, str)


def test_concurrent_tasks_batch_together(tiny):
    expected = tiny.generate("hello", max_tokens=12, ignore_eos=True)

    async def one():
        return "".join([ev.text async for ev in tiny.astream("hello", max_tokens=12, ignore_eos=True)])

    async def main():
        return await asyncio.gather(*[one() for _ in range(16)], *[tiny.agenerate("hello", max_tokens=12, ignore_eos=True) for _ in range(4)])

    assert run(main()) == [expected] * 20


def test_cancelling_a_task_cancels_its_request(tiny):
    async def main():
        async def answer():
            return await tiny.agenerate("hello", **LONG)

        task = asyncio.create_task(answer())
        await asyncio.sleep(0)  # the task submits and awaits
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async for _ in tiny.astream("hello", **LONG):
            break

    run(main())
    assert wait_idle(tiny), tiny._stats()


def test_async_errors_and_plain_asyncio_run(tiny):
    with pytest.raises(ValueError, match="max_tokens"):
        run(tiny.agenerate("hi", max_tokens=0))
    with pytest.raises(ValueError, match="top_p"):
        tiny.astream("hi", top_p=2.0)
    assert isinstance(run(tiny.agenerate("hi", max_tokens=2)), str), "a coroutine asyncio.run takes"
