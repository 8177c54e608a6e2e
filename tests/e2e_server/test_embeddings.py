"""Embeddings through the official clients: openai's embeddings.create
(which asks for base64 by default and decodes it), ollama's embed and the
older embeddings call, on all-MiniLM-L6-v2 served beside the chat model."""

import math

import openai
import pytest

EMBED = "all-minilm"


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_openai_embeddings(oai):
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."]
    r = oai.embeddings.create(model=EMBED, input=texts)
    v = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2]
    assert all(len(x) == 384 for x in v)
    assert abs(math.sqrt(sum(x * x for x in v[0])) - 1) < 1e-4
    assert cos(v[0], v[1]) > cos(v[0], v[2]) + 0.3
    assert r.usage.prompt_tokens > 0
    # Explicit float encoding gives the same numbers as the default base64.
    f = oai.embeddings.create(model=EMBED, input=texts[0], encoding_format="float")
    assert max(abs(a - b) for a, b in zip(f.data[0].embedding, v[0])) < 1e-6
    d = oai.embeddings.create(model=EMBED, input=texts[0], dimensions=128)
    assert len(d.data[0].embedding) == 128


def test_openai_embeddings_errors(oai, model):
    with pytest.raises(openai.BadRequestError) as e:
        oai.embeddings.create(model=EMBED, input="word " * 400)
    assert "256" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.embeddings.create(model=model, input="hello")
    assert "no embeddings" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=EMBED, messages=[{"role": "user", "content": "hi"}])


def test_ollama_embed(oll):
    r = oll.embed(model=EMBED, input=["hello world", "good morning"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 384
    long = oll.embed(model=EMBED, input="word " * 400)  # truncated by default, as Ollama
    assert len(long.embeddings[0]) == 384
    old = oll.embeddings(model=EMBED, prompt="hello world")
    assert max(abs(a - b) for a, b in zip(old.embedding, r.embeddings[0])) < 1e-6
