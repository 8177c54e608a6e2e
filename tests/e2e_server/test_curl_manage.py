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
    # A path on the server: only with --allow-lora-loading (the CLI uploads the files instead).
    status, body = call(base_url, "POST", "/api/create", {"model": "kiln-e2e-mf", "modelfile": f"FROM {model}\nADAPTER ./x.gguf"})
    assert status == 403 and "--allow-lora-loading" in json.loads(body)["error"]


def test_blob_upload(base_url):
    """What the Go CLI does before `create` with an ADAPTER: HEAD the
    digest, POST the file when it is missing."""
    import hashlib

    data = b"kiln e2e blob"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def send(method, digest, body=None):
        req = urllib.request.Request(base_url + "/api/blobs/" + digest, data=body, method=method)
        try:
            with urllib.request.urlopen(req) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert send("POST", digest, data) == 201
    assert send("HEAD", digest) == 200
    assert send("HEAD", "sha256:" + "0" * 64) == 404
    assert send("POST", "sha256:" + "0" * 64, data) == 400, "a body that is not its digest"
    assert send("HEAD", "sha256:" + "0" * 64) == 404, "is not kept"
    assert send("HEAD", "md5:abc") == 400


def test_open_webui_ollama_mode(base_url, model):
    for path in ["/api/version", "/api/tags", "/api/ps"]:
        status, _ = call(base_url, "GET", path)
        assert status == 200, path
    status, body = call(base_url, "POST", "/api/show", {"model": model})
    assert status == 200 and "completion" in json.loads(body)["capabilities"]
