"""The raw request and response shapes the Go `ollama` CLI uses for its
management commands (it is not installable from PyPI or npm here), and
the Open WebUI calls in Ollama mode."""

import json
import urllib.error
import urllib.request


def call(base_url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base_url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_pull_lines(base_url, model):
    status, body = call(base_url, "POST", "/api/pull", {"model": model, "insecure": False, "stream": True})
    assert status == 200
    lines = [json.loads(l) for l in body.splitlines()]
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    assert any({"digest", "total", "completed"} <= set(l) for l in lines)


def test_copy_and_delete_shapes(base_url, model):
    assert call(base_url, "POST", "/api/copy", {"source": model, "destination": "kiln-e2e-raw"}) == (200, "")
    assert call(base_url, "DELETE", "/api/delete", {"model": "kiln-e2e-raw"}) == (200, "")
    status, body = call(base_url, "DELETE", "/api/delete", {"model": "kiln-e2e-raw"})
    assert status == 404 and "error" in json.loads(body)


def test_create_with_a_modelfile(base_url, model):
    modelfile = f'FROM {model}\nPARAMETER temperature 0.1\nSYSTEM """Be brief."""\n'
    status, body = call(base_url, "POST", "/api/create", {"model": "kiln-e2e-mf", "modelfile": modelfile})
    try:
        assert status == 200, body
        assert json.loads(body.splitlines()[-1]) == {"status": "success"}
    finally:
        call(base_url, "DELETE", "/api/delete", {"model": "kiln-e2e-mf"})
    status, body = call(base_url, "POST", "/api/create", {"model": "kiln-e2e-mf", "modelfile": f"FROM {model}\nADAPTER ./x.gguf"})
    assert status == 400 and "ADAPTER" in json.loads(body)["error"]


def test_open_webui_ollama_mode(base_url, model):
    for path in ["/api/version", "/api/tags", "/api/ps"]:
        status, _ = call(base_url, "GET", path)
        assert status == 200, path
    status, body = call(base_url, "POST", "/api/show", {"model": model})
    assert status == 200 and "completion" in json.loads(body)["capabilities"]
