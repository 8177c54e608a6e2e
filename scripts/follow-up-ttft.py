#!/usr/bin/env python3
"""TTFT of a chat follow-up turn against the first turn, seen by a plain
HTTP client (stdlib only, so no client library's own per-request cost is
counted): the ~950-token conversation of tests/e2e_server/test_numbers.py,
then the same conversation plus an assistant reply and a 20-token message.

usage: follow-up-ttft.py URL [MODEL] [TRIALS]     (e.g. http://127.0.0.1:8080 smollm2 4)
"""
import http.client
import json
import statistics
import sys
import time
import urllib.parse
import uuid


def conversation(nonce):
    conv = [{"role": "system", "content": f"Session {nonce}. You are a patient teacher who explains history clearly."}]
    topics = ["the Roman roads", "medieval castles", "the printing press", "sailing ships", "the steam engine",
              "early railways", "the telegraph", "the first airplanes"]
    for t in topics:
        conv.append({"role": "user", "content": f"Please tell me about {t}. " + "I would like to know who built them, why, and how they changed daily life for ordinary people. " * 2})
        conv.append({"role": "assistant", "content": f"{t.capitalize()} changed the world. " + "They connected people, moved goods and ideas faster, and reshaped cities, trade and work across many generations. " * 2})
    conv.append({"role": "user", "content": "Which of these mattered most, in your view?"})
    return conv


def ttft_ms(url, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    for line in r:
        # The first chunk that carries text (the role-only chunk does not).
        if first is None and b'"content":"' in line and b'"content":""' not in line:
            first = (time.perf_counter() - t0) * 1000
    c.close()
    return first


def main():
    url = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else "smollm2"
    trials = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    ratios = []
    for _ in range(trials):
        conv = conversation(uuid.uuid4().hex[:8])
        body = dict(model=model, messages=conv, max_tokens=1, temperature=0, stream=True)
        first = ttft_ms(url, body)
        body["messages"] = conv + [{"role": "assistant", "content": "The printing press."},
                                   {"role": "user", "content": "Why do you think so? Give me two short reasons with one example for each of them."}]
        follow = ttft_ms(url, body)
        ratios.append(follow / first)
        print(f"first turn {first:.1f} ms, follow-up {follow:.1f} ms: {100 * follow / first:.1f}%")
    print(f"median {100 * statistics.median(ratios):.1f}%")


if __name__ == "__main__":
    main()
