import threading
import time

import pytest

import kiln

LONG = dict(max_tokens=200, ignore_eos=True)


def wait_idle(m, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running, waiting, kv_used = m._stats()
        if running == 0 and waiting == 0 and kv_used == 0:
            return True
        time.sleep(0.005)
    return False


def test_generate_returns_the_completion(tiny):
    out = tiny.generate("hello", max_tokens=6, ignore_eos=True)
    assert isinstance(out, str)
    assert tiny.generate("hello", max_tokens=6, ignore_eos=True) == out, "greedy is deterministic"
    ids = [ev.id for ev in tiny.stream("hello", max_tokens=6, ignore_eos=True) if not ev.eos]
    assert len(ids) == 6 and all(isinstance(i, int) for i in ids)
    assert tiny.generate(tiny.tokenize("hello"), max_tokens=6, ignore_eos=True) == out, "token ids or text"


def test_stream_events(tiny):
    events = list(tiny.stream("hello", max_tokens=4, ignore_eos=True, logprobs=True))
    assert len(events) == 5
    assert all(not e.eos and e.id is not None and e.logprob <= 0.0 for e in events[:4])
    last = events[-1]
    assert last.eos and last.id is None and last.finish_reason == "length"
    assert "".join(e.text for e in events) == tiny.generate("hello", max_tokens=4, ignore_eos=True)
    assert all(e.logprob is None for e in tiny.stream("hello", max_tokens=2, ignore_eos=True))
    assert "Event(" in repr(events[0])


def test_sampling_options_are_used(tiny):
    a = tiny.generate("hello", max_tokens=8, ignore_eos=True, temperature=1.0, top_p=0.9, top_k=50, seed=7)
    b = tiny.generate("hello", max_tokens=8, ignore_eos=True, temperature=1.0, top_p=0.9, top_k=50, seed=7)
    assert a == b, "the same seed draws the same tokens"


def test_chat_and_tokens(tiny):
    assert isinstance(tiny.chat([{"role": "user", "content": "hi"}], max_tokens=4), str)
    evs = list(tiny.chat_stream([{"role": "user", "content": "hi"}], max_tokens=3, ignore_eos=True))
    assert evs[-1].eos and len(evs) == 4
    ids = tiny.tokenize("hello world", add_special=False)
    assert ids and tiny.detokenize(ids) == "hello world"


def test_bad_arguments_fail_fast(tiny, tmp_path):
    with pytest.raises(ValueError, match="`max_tokens` must be ≥ 1, got -1"):
        tiny.generate("hi", max_tokens=-1)
    with pytest.raises(ValueError, match="top_p"):
        tiny.stream("hi", top_p=0.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_token'"):
        tiny.generate("hi", max_token=3)
    with pytest.raises(TypeError, match="prompt"):
        tiny.generate(3.5)
    with pytest.raises(ValueError, match="messages"):
        tiny.chat([{"content": "no role"}])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tiny.detokenize([10**9])
    with pytest.raises(ValueError, match="out of range"):
        tiny.generate([-1])
    with pytest.raises(ValueError, match="unknown model"):
        kiln.Model("no-such-model-anywhere")
    with pytest.raises(ValueError, match="threads"):
        kiln.Model("smollm2", threads=0)
    with pytest.raises(ValueError, match="unknown device"):
        kiln.Model("smollm2", device="tpu")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(kiln.KilnError):
        kiln.Model(str(bad))


def test_engine_refusals_carry_the_engines_message(tiny):
    with pytest.raises(ValueError, match="the prompt has .* tokens but the context holds 256"):
        tiny.generate("hello " * 300, max_tokens=2)


def test_leaving_a_stream_cancels_it_and_frees_its_kv(tiny, tiny_long):
    for ev in tiny.stream("hello", **LONG):
        break
    assert wait_idle(tiny), tiny._stats()
    # Long enough that the cancel lands first (200 tokens can end before it on a fast machine).
    s = tiny_long.stream("hello", max_tokens=4000, ignore_eos=True)
    next(s)
    s.cancel()
    assert [e for e in s][-1].finish_reason == "cancelled"
    assert wait_idle(tiny_long), tiny_long._stats()


def test_threads_share_the_engine_and_release_the_gil(tiny):
    expected = tiny.generate("hello", max_tokens=200, ignore_eos=True)
    results, ticks = [None] * 8, [0]
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.0005)

    def work(i):
        results[i] = tiny.generate("hello", max_tokens=200, ignore_eos=True)

    t = threading.Thread(target=ticker)
    t.start()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    t.join()
    assert results == [expected] * 8
    assert ticks[0] > 5, "Python code ran while the engine worked"


def test_default_model_answers(smollm2):
    out = smollm2.chat([{"role": "user", "content": "What is the capital of France? Answer in one word."}], max_tokens=8)
    assert "Paris" in out
    assert smollm2.generate("The capital of France is", max_tokens=3).strip().startswith("Paris")
