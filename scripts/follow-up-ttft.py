#!/usr/bin/env python3
"""TTFT of a chat follow-up turn against the first turn, seen by a plain
HTTP client (stdlib only, so no client library's own per-request cost is
counted): the ~950-token conversation of tests/e2e_server/test_numbers.py,
then the same conversation plus the assistant's answer and a 20-token message.

Two flows, alternated per trial:
- `model`: as a chat client does it. The first turn streams the model's own
  answer (up to ANSWER_TOKENS tokens, greedy), the client sends it back as
  the assistant message with the new message, after THINK_S seconds (a
  person reads the answer and types the next message).
- `fixed`: the first turn stops after one token and the client writes the
  assistant message itself ("The printing press."), so nothing of the
  answer's tokens can be reused.

TTFT is the time to the first chunk that carries text (the role-only chunk
does not count). The usage chunk gives the follow-up's cached tokens.

Requests reuse one kept-alive connection per server, as the `openai` and
`ollama` clients (httpx) do; NEW_CONNECTION=1 opens a fresh one per request
(its TCP handshake then counts in both turns' TTFT). CLIENT=raw sends the
request bytes on a plain socket and scans what arrives, without
`http.client`'s request building and line-by-line reading (~0.3 ms per
request here): what is left of the gap between this client's TTFT and the
server's timing record is the server's HTTP layer and the loopback.

TIMINGS=FILE (one local server started with `kiln serve --timings-file
FILE`, JSONL) joins each request with the server's record of it: the
server's own TTFT (admission + engine) and the ratio in its records are
printed too, and the client's TTFT minus the server's is what the HTTP
path and the client cost.

Several servers (URLs joined by commas, e.g. two builds side by side) are
measured in turns, trial by trial, so a slow phase of a shared machine hits
them alike; medians are printed per server and flow.

usage: follow-up-ttft.py URL[,URL...] [MODEL] [TRIALS] [FLOWS]
       (e.g. http://127.0.0.1:8080 smollm2 6 model,fixed)
"""
import http.client
import json
import os
import re
import socket
import statistics
import sys
import time
import urllib.parse
import uuid

ANSWER_TOKENS = 48
THINK_S = 0.5
NEW_MESSAGE = "Why do you think so? Give me two short reasons with one example for each of them."


def conversation(nonce):
    conv = [{"role": "system", "content": f"Session {nonce}. You are a patient teacher who explains history clearly."}]
    topics = ["the Roman roads", "medieval castles", "the printing press", "sailing ships", "the steam engine",
              "early railways", "the telegraph", "the first airplanes"]
    for t in topics:
        conv.append({"role": "user", "content": f"Please tell me about {t}. " + "I would like to know who built them, why, and how they changed daily life for ordinary people. " * 2})
        conv.append({"role": "assistant", "content": f"{t.capitalize()} changed the world. " + "They connected people, moved goods and ideas faster, and reshaped cities, trade and work across many generations. " * 2})
    conv.append({"role": "user", "content": "Which of these mattered most, in your view?"})
    return conv


NEW_CONNECTION = os.environ.get("NEW_CONNECTION") == "1"
_connections = {}


def connection(url):
    """The kept-alive connection to `url` (a fresh one with NEW_CONNECTION=1)."""
    c = None if NEW_CONNECTION else _connections.get(url)
    if c is None:
        u = urllib.parse.urlparse(url)
        c = http.client.HTTPConnection(u.hostname, u.port or 80)
        if not NEW_CONNECTION:
            c.connect()
            _connections[url] = c
    return c


def turn(url, body):
    """(TTFT ms, answer text, usage) of one streamed chat request."""
    c = connection(url)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first, text, usage = None, [], None
    for line in r:
        # The first chunk that carries text (the role-only chunk does not).
        if first is None and b'"content":"' in line and b'"content":""' not in line:
            first = (time.perf_counter() - t0) * 1000
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            for ch in chunk.get("choices") or []:
                text.append(ch.get("delta", {}).get("content") or "")
            usage = chunk.get("usage") or usage
    if NEW_CONNECTION or r.will_close:
        c.close()
        _connections.pop(url, None)
    return first, "".join(text), usage


RAW = os.environ.get("CLIENT") == "raw"
_sockets = {}


def dechunk(body):
    """The payload of a chunked HTTP/1.1 body."""
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


def turn_raw(url, body):
    """`turn` on a plain kept-alive socket (CLIENT=raw)."""
    s = _sockets.get(url)
    if s is None:
        u = urllib.parse.urlparse(url)
        s = socket.create_connection((u.hostname, u.port or 80))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _sockets[url] = s
    data = json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(data)) + data
    t0 = time.perf_counter()
    s.sendall(req)
    buf, first = b"", None
    while not buf.endswith(b"\r\n0\r\n\r\n"):
        got = s.recv(65536)
        if not got:
            raise ConnectionError("the server closed the connection")
        buf += got
        if first is None and re.search(rb'"content":"[^"]', buf):
            first = (time.perf_counter() - t0) * 1000
    head, _, rest = buf.partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        raise ValueError(f"expected a chunked stream, got: {head[:200]!r}")
    text, usage = [], None
    for line in dechunk(rest).split(b"\n"):
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            for ch in chunk.get("choices") or []:
                text.append(ch.get("delta", {}).get("content") or "")
            usage = chunk.get("usage") or usage
    return first, "".join(text), usage


TIMINGS = os.environ.get("TIMINGS")


def timed(turn_, url, body):
    """`turn_` plus, with TIMINGS, the server's TTFT (admission + engine)
    from the record the request appends to the timings file."""
    if not TIMINGS:
        return turn_(url, body) + (None,)
    start = os.path.getsize(TIMINGS) if os.path.exists(TIMINGS) else 0
    out = turn_(url, body)
    deadline = time.time() + 2
    while True:
        if not os.path.exists(TIMINGS):
            raise RuntimeError(f"{TIMINGS} does not exist: start the server with --timings-file {TIMINGS}")
        with open(TIMINGS, "rb") as f:
            f.seek(start)
            lines = [l for l in f.read().split(b"\n") if l.strip()]
        if lines or time.time() > deadline:
            break
        time.sleep(0.01)
    if len(lines) != 1:
        raise RuntimeError(f"expected one new record in {TIMINGS}, found {len(lines)} (is it this server's file?)")
    rec = json.loads(lines[0])
    return out + (rec.get("admit_ms", 0.0) + rec["ttft_ms"],)


def trial(url, model, flow):
    turn_ = turn_raw if RAW else turn
    conv = conversation(uuid.uuid4().hex[:8])
    req = dict(model=model, temperature=0)
    if flow == "model":
        first, answer, u1, s1 = timed(turn_, url, dict(req, messages=conv, max_tokens=ANSWER_TOKENS))
        time.sleep(THINK_S)
    else:
        first, _, u1, s1 = timed(turn_, url, dict(req, messages=conv, max_tokens=1))
        answer = "The printing press."
    follow_conv = conv + [{"role": "assistant", "content": answer}, {"role": "user", "content": NEW_MESSAGE}]
    follow, _, u2, s2 = timed(turn_, url, dict(req, messages=follow_conv, max_tokens=1))
    cached = (u2.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    server = dict(server_first=s1, server_follow=s2, server_ratio=s2 / s1, gap=follow - s2) if s1 else {}
    return dict(server, flow=flow, first_ms=first, follow_ms=follow, ratio=follow / first, first_prompt=u1["prompt_tokens"],
                follow_prompt=u2["prompt_tokens"], cached=cached, computed=u2["prompt_tokens"] - cached)


def main():
    urls = sys.argv[1].split(",")
    if TIMINGS and len(urls) > 1:
        sys.exit("TIMINGS needs a single server")
    model = sys.argv[2] if len(sys.argv) > 2 else "smollm2"
    trials = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    flows = (sys.argv[4] if len(sys.argv) > 4 else "model,fixed").split(",")
    rows = []
    for _ in range(trials):
        for flow in flows:
            for url in urls:
                r = dict(trial(url, model, flow), url=url)
                rows.append(r)
                who = f"{url} " if len(urls) > 1 else ""
                print(f"{who}{flow:5}: first turn {r['first_ms']:.1f} ms ({r['first_prompt']} tokens), follow-up {r['follow_ms']:.1f} ms "
                      f"({r['follow_prompt']} tokens, {r['cached']} cached, {r['computed']} computed): {100 * r['ratio']:.1f}%"
                      + (f"; server {r['server_first']:.1f} / {r['server_follow']:.2f} ms: {100 * r['server_ratio']:.2f}%" if TIMINGS else ""))
    for url in urls:
        for flow in flows:
            rs = [r for r in rows if r["flow"] == flow and r["url"] == url]
            who = f"{url} " if len(urls) > 1 else ""
            print(f"{who}{flow:5}: median first {statistics.median(r['first_ms'] for r in rs):.1f} ms, follow-up "
                  f"{statistics.median(r['follow_ms'] for r in rs):.2f} ms, ratio median {100 * statistics.median(r['ratio'] for r in rs):.2f}% "
                  f"(min {100 * min(r['ratio'] for r in rs):.2f}%, {len(rs)} trials)")
            if TIMINGS:
                print(f"{who}{flow:5}: server's records: median first {statistics.median(r['server_first'] for r in rs):.1f} ms, "
                      f"follow-up {statistics.median(r['server_follow'] for r in rs):.2f} ms, ratio median "
                      f"{100 * statistics.median(r['server_ratio'] for r in rs):.2f}%; client minus server (follow-up) median "
                      f"{statistics.median(r['gap'] for r in rs):.2f} ms")


if __name__ == "__main__":
    main()
