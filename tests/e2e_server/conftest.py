"""Fixtures for the end-to-end server tests.

scripts/e2e-server.sh starts `kiln serve` and sets KILN_E2E_URL; the tests
drive it with the official `openai` and `ollama` clients and curl.
"""

import json
import os
import re
import time
import urllib.request

import pytest

MODEL = os.environ.get("KILN_E2E_MODEL", "smollm2")


@pytest.fixture(scope="session")
def base_url():
    url = os.environ.get("KILN_E2E_URL")
    if not url:
        pytest.fail("KILN_E2E_URL is not set: run scripts/e2e-server.sh")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def model():
    return MODEL


@pytest.fixture(scope="session")
def oai(base_url):
    import openai

    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def oll(base_url):
    import ollama

    return ollama.Client(host=base_url, timeout=120)


def metric(base_url, name, labels=""):
    """The value of one Prometheus sample (0 when absent)."""
    text = urllib.request.urlopen(base_url + "/metrics").read().decode()
    pat = re.compile(r"^" + re.escape(name + labels) + r" (\S+)$", re.M)
    m = pat.search(text)
    return float(m.group(1)) if m else 0.0


def wait_idle(base_url, model, timeout=10.0):
    """Waits until the engine runs nothing and holds no KV blocks; returns seconds waited."""
    t0 = time.monotonic()
    lab = '{model="%s"}' % model
    while time.monotonic() - t0 < timeout:
        if (
            metric(base_url, "kiln_queue_running", lab) == 0
            and metric(base_url, "kiln_kv_blocks_used", lab) == 0
            and metric(base_url, "kiln_requests_in_flight", lab) == 0
        ):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError("engine still busy after %.1fs" % timeout)


def post_json(base_url, path, body):
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())
