"""curl against kiln: raw HTTP edge cases, streaming, and disconnects
(in prefill and in decode) that must cancel the generation and free KV."""

import json
import subprocess
import time

from conftest import metric, wait_idle


def curl(base_url, path, *args, data=None, timeout=60):
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", base_url + path, *args]
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    p = subprocess.run(cmd, input=data.encode() if isinstance(data, str) else data, capture_output=True, timeout=timeout)
    out = p.stdout.decode(errors="replace")
    body, _, code = out.rpartition("\n")
    return int(code or 0), body


def ok_again(base_url, model):
    code, body = curl(base_url, "/v1/chat/completions", data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
    assert code == 200, body


def test_health_metrics_openapi(base_url):
    assert curl(base_url, "/health")[0] == 200
    code, text = curl(base_url, "/metrics")
    assert code == 200 and "kiln_requests_total" in text and "kiln_time_to_first_token_seconds_bucket" in text
    code, doc = curl(base_url, "/openapi.json")
    assert code == 200 and "/v1/chat/completions" in json.loads(doc)["paths"]
    assert json.loads(curl(base_url, "/api/version")[1])["version"]


def test_malformed_wrong_types_and_oversized(base_url, model):
    for data, want in [
        ('{"model": "x", "messages": [', 400),
        ('{"model": 5, "messages": []}', 400),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}), 400),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "x" * (5 << 20)}]}), 413),
    ]:
        code, body = curl(base_url, "/v1/chat/completions", data=data)
        assert code == want, body
        assert json.loads(body)["error"]["message"]
        ok_again(base_url, model)


def test_sse_stream_with_curl(base_url, model):
    code, body = curl(base_url, "/v1/chat/completions", "-N", data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}))
    assert code == 200
    events = [e[len("data: "):] for e in body.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"
    code, body = curl(base_url, "/api/generate", data=json.dumps({"model": model, "prompt": "hi", "options": {"num_predict": 4}}))
    lines = [json.loads(x) for x in body.splitlines()]
    assert lines[-1]["done"] and "eval_count" in lines[-1]


def disconnect_after(base_url, body, seconds):
    """Starts a streamed request with curl and kills it after `seconds`."""
    p = subprocess.Popen(["curl", "-sS", "-N", base_url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d", json.dumps(body)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    p.kill()
    out = p.communicate()[0].decode(errors="replace")
    return time.monotonic(), out


def test_disconnect_in_decode_cancels_and_frees_kv(base_url, model):
    wait_idle(base_url, model)
    before = metric(base_url, "kiln_cancelled_total")
    gen_before = metric(base_url, "kiln_generated_tokens_total")
    body = {"model": model, "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 3000, "ignore_eos": True, "stream": True}
    _, out = disconnect_after(base_url, body, 1.5)
    assert '"content"' in out, "was decoding when the client left"
    waited = wait_idle(base_url, model, timeout=5)
    assert metric(base_url, "kiln_cancelled_total") == before + 1
    assert metric(base_url, "kiln_generated_tokens_total") - gen_before < 1000
    print(f"decode disconnect: engine idle {waited * 1000:.0f} ms after the client left")
    ok_again(base_url, model)


def test_disconnect_in_prefill_cancels_and_frees_kv(base_url, model):
    wait_idle(base_url, model)
    before = metric(base_url, "kiln_cancelled_total")
    # ~3000 prompt tokens: prefill takes seconds here; leave after 0.5 s.
    text = " ".join(f"item{i}" for i in range(900))
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 50, "stream": True}
    _, out = disconnect_after(base_url, body, 0.5)
    assert out.startswith("data: "), f"the request was accepted: {out[:300]}"
    assert '"content":"' not in out.replace('"content":""', ""), "still in prefill when the client left"
    waited = wait_idle(base_url, model, timeout=10)
    assert metric(base_url, "kiln_cancelled_total") == before + 1
    print(f"prefill disconnect: engine idle {waited * 1000:.0f} ms after the client left")
    ok_again(base_url, model)


def test_disconnect_during_a_non_streaming_request_cancels(base_url, model):
    wait_idle(base_url, model)
    before = metric(base_url, "kiln_cancelled_total")
    body = {"model": model, "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 3000, "ignore_eos": True}
    p = subprocess.Popen(["curl", "-sS", base_url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d", json.dumps(body)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    p.kill()
    p.communicate()
    waited = wait_idle(base_url, model, timeout=10)
    assert metric(base_url, "kiln_cancelled_total") == before + 1
    print(f"non-streaming disconnect: engine idle {waited * 1000:.0f} ms after the client left")
    ok_again(base_url, model)
