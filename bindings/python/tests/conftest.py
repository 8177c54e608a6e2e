import pytest

import kiln
from kiln import _kiln


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random-weight chat model: fast, offline, gibberish output."""
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    _kiln._write_tiny_model(str(path))
    return kiln.Model(str(path), threads=1)


@pytest.fixture(scope="session")
def tiny_long(tmp_path_factory):
    """The tiny model with a context of 4096 tokens (room for tool preambles, long generations)."""
    path = tmp_path_factory.mktemp("model") / "tiny-long.gguf"
    _kiln._write_tiny_model(str(path), ctx=4096)
    return kiln.Model(str(path), threads=1, ctx_size=4096)


@pytest.fixture(scope="session")
def smollm2():
    """The default model (fetched into $KILN_HOME on first use)."""
    return kiln.Model("smollm2")
