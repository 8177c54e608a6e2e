"""Model management with the official `ollama` client: pull (streamed
progress), list, ps, show, copy, create (with a Go TEMPLATE too), delete,
and their errors. What `ollama pull/list/ps/show/cp/create/rm` send (the Go
CLI itself is not on PyPI or npm; test_curl_manage.py checks the raw shapes
it reads, scripts/test-ollama-go-client.sh the official Go client)."""

import ollama
import pytest

from peft_adapter import write_peft


def test_pull_streams_progress(oll, model):
    parts = list(oll.pull(model, stream=True))
    assert parts[0].status == "pulling manifest"
    assert parts[-1].status == "success"
    sized = [p for p in parts if p.total]
    assert sized and sized[-1].completed == sized[-1].total and sized[-1].digest
    assert oll.pull(model, stream=False).status == "success"


def test_pull_errors(oll):
    with pytest.raises(ollama.ResponseError) as e:
        oll.pull("no-such-model")
    assert e.value.status_code == 404 and "smollm2" in str(e.value)


def test_copy_create_show_delete(oll, model):
    oll.copy(model, "kiln-e2e-copy")
    oll.create(model="kiln-e2e-pirate", from_="kiln-e2e-copy", system="You are a pirate.", parameters={"num_predict": 4, "temperature": 0})
    try:
        names = [m.model for m in oll.list().models]
        assert "kiln-e2e-copy" in names and "kiln-e2e-pirate" in names
        s = oll.show("kiln-e2e-pirate")
        assert s.modelfile.startswith(f"FROM {model}") and "You are a pirate." in s.modelfile
        assert "num_predict 4" in s.parameters
        assert "completion" in s.capabilities
        r = oll.generate(model="kiln-e2e-pirate", prompt="Hello", stream=False)
        assert r.eval_count <= 4
        same = oll.generate(model=model, prompt="Hello", system="You are a pirate.", options={"num_predict": 4, "temperature": 0}, stream=False)
        assert (r.prompt_eval_count, r.response) == (same.prompt_eval_count, same.response), "the alias's system prompt and parameters"
        assert any(m.model == "kiln-e2e-pirate" for m in oll.ps().models) or any(m.model == model for m in oll.ps().models)
    finally:
        oll.delete("kiln-e2e-copy")
        oll.delete("kiln-e2e-pirate")
    assert "kiln-e2e-pirate" not in [m.model for m in oll.list().models]
    with pytest.raises(ollama.ResponseError) as e:
        oll.delete("kiln-e2e-pirate")
    assert e.value.status_code == 404


def test_manage_errors(oll, model):
    oll.generate(model=model, prompt="", keep_alive="10m")
    with pytest.raises(ollama.ResponseError) as e:
        oll.delete(model)
    assert e.value.status_code == 409 and "loaded" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        oll.create(model="kiln-e2e-x", from_=model, template="{{ if .System }}\n{{ .Prompt }")
    assert e.value.status_code == 400 and "line 2, column 12" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        oll.create(model="kiln-e2e-x", from_=model, parameters={"temperature": -1})
    assert e.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as e:
        oll.copy("no-such-model", "kiln-e2e-x")
    assert e.value.status_code == 404


CHATML = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


def test_create_with_a_template(oll, model):
    """A Modelfile TEMPLATE formats the prompt: the same tokens as the text
    it should write, sent raw."""
    oll.create(model="kiln-e2e-tmpl", from_=model, system="Be brief.", template=CHATML)
    try:
        assert oll.show("kiln-e2e-tmpl").template == CHATML
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
        r = oll.chat(model="kiln-e2e-tmpl", messages=messages, options={"num_predict": 1}, stream=False)
        text = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")
        raw = oll.generate(model=model, prompt=text, raw=True, options={"num_predict": 1}, stream=False)
        assert r.prompt_eval_count == raw.prompt_eval_count
    finally:
        oll.delete("kiln-e2e-tmpl")


def test_create_with_an_adapter(oll, model, tmp_path):
    """What `ollama create -f Modelfile` does for `ADAPTER ./dir`: upload the
    files as blobs, then create with `adapters`. The created model answers
    with the adapter applied; show, copy and delete work on it."""
    files = write_peft(tmp_path / "peft")
    adapters = {name: oll.create_blob(path) for name, path in files.items()}
    oll.create(model="kiln-e2e-lora", from_=model, adapters=adapters, parameters={"temperature": 0})
    try:
        ask = {"prompt": "Name three colors.", "options": {"num_predict": 12, "temperature": 0}, "stream": False}
        tuned = oll.generate(model="kiln-e2e-lora", **ask).response
        base = oll.generate(model=model, **ask).response
        assert tuned != base, "the adapter changes the answer"
        assert oll.generate(model="kiln-e2e-lora", **ask).response == tuned, "and does so every time"
        chat = oll.chat(model="kiln-e2e-lora", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4}, stream=False)
        assert chat.message.content
        s = oll.show("kiln-e2e-lora")
        assert s.modelfile.startswith(f"FROM {model}\nADAPTER ") and s.details.parent_model == model
        assert "kiln-e2e-lora" in [m.model for m in oll.list().models]
        oll.copy("kiln-e2e-lora", "kiln-e2e-lora2")
        oll.delete("kiln-e2e-lora")
        assert oll.generate(model="kiln-e2e-lora2", **ask).response == tuned, "a copy keeps the adapter"
    finally:
        for m in ("kiln-e2e-lora", "kiln-e2e-lora2"):
            try:
                oll.delete(m)
            except ollama.ResponseError:
                pass
    assert not {"kiln-e2e-lora", "kiln-e2e-lora2"} & {m.model for m in oll.list().models}


def test_create_with_a_bad_adapter(oll, model, tmp_path):
    files = write_peft(tmp_path / "wide", layers=1, q_in=512)
    adapters = {name: oll.create_blob(path) for name, path in files.items()}
    with pytest.raises(ollama.ResponseError) as e:
        oll.create(model="kiln-e2e-bad", from_=model, adapters=adapters)
    assert e.value.status_code == 400 and "cannot apply" in str(e.value) and "576" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        oll.create(model="kiln-e2e-bad", from_=model, adapters={"adapter.gguf": "sha256:" + "0" * 64})
    assert e.value.status_code == 400 and "upload it first" in str(e.value)
    assert "kiln-e2e-bad" not in [m.model for m in oll.list().models]
