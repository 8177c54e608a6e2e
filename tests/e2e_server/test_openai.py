"""The official `openai` client against kiln."""

import openai
import pytest

from conftest import post_json

MSG = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


def test_models_lists_the_default_model(oai, model):
    ids = [m.id for m in oai.models.list().data]
    assert model in ids


def test_chat_non_streaming(oai, model):
    r = oai.chat.completions.create(model=model, messages=MSG, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens is not None


def test_chat_streaming_with_usage(oai, model):
    stream = oai.chat.completions.create(
        model=model, messages=MSG, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text and finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens >= 1


def test_streaming_equals_non_streaming_greedy(oai, model):
    kw = dict(model=model, messages=MSG, max_tokens=12, temperature=0)
    full = oai.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(stream=True, **kw) if c.choices)
    assert streamed == full


def test_follow_up_reuses_the_prefix(oai, model):
    conv = [{"role": "system", "content": "You are a helpful assistant. " * 8}, {"role": "user", "content": "Tell me about cats."}]
    first = oai.chat.completions.create(model=model, messages=conv, max_tokens=8, temperature=0)
    conv += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "And dogs?"}]
    second = oai.chat.completions.create(model=model, messages=conv, max_tokens=4, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 16


def test_sampling_knobs_seed_stop_logprobs(oai, model):
    kw = dict(model=model, messages=MSG, max_tokens=10, temperature=0.9, top_p=0.9, seed=42, presence_penalty=0.5, frequency_penalty=0.2)
    a = oai.chat.completions.create(**kw).choices[0].message.content
    b = oai.chat.completions.create(**kw).choices[0].message.content
    assert a == b, "same seed, same text"
    r = oai.chat.completions.create(model=model, messages=MSG, max_tokens=5, logprobs=True, top_logprobs=3, temperature=0)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens and all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in lp)
    r = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count: 1, 2, 3, 4, 5, 6"}], max_tokens=30, temperature=0, stop=[","])
    assert "," not in r.choices[0].message.content
    extra = oai.chat.completions.create(model=model, messages=MSG, max_tokens=3, extra_body={"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1, "repeat_last_n": 32})
    assert extra.usage.completion_tokens <= 3


def test_completions_text_and_tokens(oai, model):
    r = oai.completions.create(model=model, prompt="The quick brown fox", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    r2 = oai.completions.create(model=model, prompt=[504, 2365, 6354], max_tokens=4, temperature=0)
    assert r2.usage.prompt_tokens == 3
    chunks = list(oai.completions.create(model=model, prompt="Hello", max_tokens=5, stream=True, temperature=0))
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)


@pytest.mark.parametrize(
    "kw, exc",
    [
        (dict(temperature=-1), openai.BadRequestError),
        (dict(top_p=1.5), openai.BadRequestError),
        (dict(top_p=0), openai.BadRequestError),
        (dict(max_tokens=-3), openai.BadRequestError),
        (dict(n=2), openai.BadRequestError),
        (dict(messages=[]), openai.BadRequestError),
        (dict(messages=[{"role": "pirate", "content": "arr"}]), openai.BadRequestError),
        (dict(messages=[{"role": "user", "content": "word " * 12000}]), openai.BadRequestError),
        (dict(model="no-such-model"), openai.NotFoundError),
        (dict(model="../../../etc/passwd"), openai.BadRequestError),
    ],
)
def test_bad_requests_are_4xx_and_the_server_keeps_serving(oai, model, kw, exc):
    args = dict(model=model, messages=MSG, max_tokens=4)
    args.update(kw)
    with pytest.raises(exc) as e:
        oai.chat.completions.create(**args)
    assert e.value.status_code in (400, 404)
    assert e.value.body and e.value.body.get("message")
    ok = oai.chat.completions.create(model=model, messages=MSG, max_tokens=2)
    assert ok.choices[0].message.content is not None


def test_unknown_model_lists_available(base_url, model):
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as e:
        post_json(base_url, "/v1/chat/completions", {"model": "nope", "messages": MSG})
    assert e.value.code == 404
    assert model in e.value.read().decode()
