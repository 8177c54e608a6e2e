"""The official `ollama` client against kiln."""

import ollama
import pytest


def test_chat_non_streaming(oll, model):
    r = oll.chat(model=model, messages=[{"role": "user", "content": "Say hello."}], options={"num_predict": 8, "temperature": 0}, stream=False)
    assert r.message.role == "assistant" and r.message.content
    assert r.done and r.done_reason in ("stop", "length")
    assert r.eval_count >= 1 and r.prompt_eval_count > 5
    assert r.total_duration > 0 and r.eval_duration > 0 and r.prompt_eval_duration > 0
    assert r.load_duration is not None


def test_chat_streaming(oll, model):
    parts = list(oll.chat(model=model, messages=[{"role": "user", "content": "Count to five."}], options={"num_predict": 10}, stream=True))
    assert parts[-1].done and all(not p.done for p in parts[:-1])
    assert "".join(p.message.content for p in parts)


def test_generate(oll, model):
    r = oll.generate(model=model, prompt="Why is the sky blue?", options={"num_predict": 6, "seed": 3, "top_k": 20, "top_p": 0.8, "repeat_penalty": 1.1, "stop": ["\n\n"]}, stream=False)
    assert r.response and r.done
    chunks = list(oll.generate(model=model, prompt="Hi", options={"num_predict": 4}, stream=True))
    assert chunks[-1].done and chunks[-1].eval_count >= 1


def test_generate_context(oll, model):
    first = oll.generate(model=model, prompt="My name is Ada.", options={"num_predict": 8, "temperature": 0}, stream=False)
    assert len(first.context) == first.prompt_eval_count + first.eval_count
    second = oll.generate(model=model, prompt="What is my name?", context=first.context, options={"num_predict": 8}, stream=False)
    assert second.prompt_eval_count > len(first.context)
    assert second.context[: len(first.context)] == first.context


def test_list_show_ps(oll, model):
    names = [m.model for m in oll.list().models]
    assert model in names
    oll.generate(model=model, prompt="hi", options={"num_predict": 1}, keep_alive="10m")
    ps = oll.ps().models
    assert any(m.model == model and m.expires_at is not None for m in ps)
    s = oll.show(model)
    assert s.details.format == "gguf"
    assert s.template and "im_start" in s.template


def test_errors(oll, model):
    with pytest.raises(ollama.ResponseError) as e:
        oll.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        oll.chat(model=model, messages=[{"role": "user", "content": "hi"}], options={"temperature": -2}, stream=False)
    assert e.value.status_code == 400
    assert oll.chat(model=model, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2}).done
