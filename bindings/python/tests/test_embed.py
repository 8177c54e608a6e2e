"""Embedding models: embed, aembed, rerank, and the errors between kinds."""

import asyncio
import json
import math
import pathlib

import pytest

import kiln
from kiln import _kiln

VECTORS = pathlib.Path(__file__).parent / "data" / "minilm_vectors.json"


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture(scope="session")
def encoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder")
    _kiln._write_tiny_encoder(str(path))
    return kiln.Model(str(path), threads=1)


@pytest.fixture(scope="session")
def reranker(tmp_path_factory):
    path = tmp_path_factory.mktemp("reranker")
    _kiln._write_tiny_encoder(str(path), rank=True)
    return kiln.Model(str(path), threads=1)


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 from the catalogue (fetched into $KILN_HOME on first use)."""
    return kiln.Model("all-minilm")


def test_embed_one_text_or_many(encoder):
    assert encoder.kind == "embed" and encoder.dimensions == 64
    one = encoder.embed("hello world")
    assert isinstance(one, list) and len(one) == 64 and all(isinstance(x, float) for x in one)
    many = encoder.embed(["hello world", "a b c"])
    assert len(many) == 2 and many[0] == pytest.approx(one, abs=1e-6), "batched equals alone"
    assert abs(math.sqrt(sum(x * x for x in one)) - 1) < 1e-5, "unit length (the default pooling normalizes)"
    cut = encoder.embed(["hello world"], dimensions=8)
    assert len(cut[0]) == 8 and abs(math.sqrt(sum(x * x for x in cut[0])) - 1) < 1e-5
    assert asyncio.run(encoder.aembed(["hello world", "a b c"])) == many


def test_embedding_errors(encoder, tiny):
    with pytest.raises(ValueError, match="`dimensions` must be between 1 and 64, got 0"):
        encoder.embed("hi", dimensions=0)
    with pytest.raises(ValueError, match="text 1 is empty"):
        encoder.embed(["hi", ""])
    with pytest.raises(ValueError, match="must not be empty"):
        encoder.embed([])
    with pytest.raises(TypeError, match="`texts` must be a str or a list of str"):
        encoder.embed(3)
    with pytest.raises(ValueError, match="longer|holds"):
        encoder.embed("hello " * 100, truncate=False)
    assert len(encoder.embed("hello " * 100)) == 64, "truncated by default"
    with pytest.raises(ValueError, match="`generate` needs a text generation model.*use `embed`"):
        encoder.generate("hi")
    with pytest.raises(ValueError, match="`chat` needs a text generation model"):
        encoder.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="`embed` needs an embedding model"):
        tiny.embed("hi")
    with pytest.raises(ValueError, match="`rerank` needs a reranker"):
        encoder.rerank("q", ["d"])
    assert tiny.dimensions is None and tiny.kind == "generate"


def test_rerank_best_first(reranker):
    assert reranker.kind == "rerank"
    docs = ["a b", "hello world", "c"]
    ranked = reranker.rerank("hello", docs)
    assert sorted(i for i, _ in ranked) == [0, 1, 2]
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True)
    with pytest.raises(ValueError, match="`documents` must not be empty"):
        reranker.rerank("hello", [])
    with pytest.raises(ValueError, match="use `embed` or `rerank`"):
        reranker.stream("hi")


def test_minilm_matches_the_engines_vectors(minilm):
    """Vectors through the binding against `kiln embed all-minilm` (the engine's Embedder) on the same texts."""
    expected = json.loads(VECTORS.read_text())
    got = minilm.embed(list(expected))
    assert minilm.kind == "embed" and minilm.dimensions == 384 and minilm.ctx_size == 256
    for v, (text, e) in zip(got, expected.items()):
        assert len(v) == 384
        assert cosine(v, e) > 0.99999, text
    food, bread, market = got
    assert cosine(food, bread) > cosine(food, market) + 0.3, "similar sentences are closer"
