#!/usr/bin/env python3
"""The chat page in a real browser: headless Chromium driven by Selenium.

Starts `kiln serve` on the default model, then: loads the page, sends a
message and sees tokens stream in, stops a generation, reloads and finds
the conversation, checks that model output cannot inject markup, and that
the page asks for the API key when the server has one. Saves screenshots.

    python3 tests/e2e_web/chat_page.py --kiln target/debug/kiln --out target/web-screenshots

Needs Debian's `chromium` and `chromium-driver` (or CHROME / CHROMEDRIVER
naming others) and `pip install selenium`. The model comes from the kiln
cache (`kiln pull smollm2`; KILN_HOME as for the server).
"""
import argparse
import json
import re
import os
import socket
import subprocess
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ASSISTANT = "article[data-role='assistant']"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(kiln, extra=()):
    port = free_port()
    proc = subprocess.Popen(
        [kiln, "serve", "--model", "smollm2", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"kiln serve exited: {proc.stderr.read().decode(errors='replace')}")
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("kiln serve did not start in 60 s")


def browser(width, height):
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROME", "/usr/bin/chromium")
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}"]:
        opts.add_argument(a)
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=opts, service=service)


def step(name):
    print(f"  {name}", flush=True)


def wait(d, what, cond, timeout=60):
    return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond(), message=what)


def assistants(d):
    return d.find_elements(By.CSS_SELECTOR, ASSISTANT)


def last(d, part):
    """Text of a part of the last assistant message (read in one script: the
    page repaints the message while it streams)."""
    return d.execute_script(
        "const a = document.querySelectorAll(arguments[0]); const e = a.length && a[a.length - 1].querySelector(arguments[1]);"
        "return e ? e.textContent : '';",
        ASSISTANT,
        part,
    )


def last_text(d):
    return last(d, ".content")


def streaming(d):
    return d.find_element(By.ID, "stop").is_displayed()


def send(d, text):
    box = d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Message']")
    box.clear()
    box.send_keys(text)
    d.find_element(By.CSS_SELECTOR, "button[aria-label='Send']").click()


def embedding_models(url):
    """The models the server lists whose only capability is embedding."""
    names = [m["id"] for m in json.load(urllib.request.urlopen(url + "/v1/models", timeout=30))["data"]]
    out = []
    for name in names:
        req = urllib.request.Request(url + "/api/show", data=json.dumps({"model": name}).encode(),
                                     headers={"content-type": "application/json"})
        caps = json.load(urllib.request.urlopen(req, timeout=30)).get("capabilities", [])
        if "embedding" in caps and "completion" not in caps:
            out.append(name)
    return out


def chat(d, url, out):
    d.get(url)
    # Greedy and bounded: a sampled answer can run on until the context is full.
    d.execute_script("localStorage.setItem('kiln.settings', JSON.stringify({system: '', temperature: '0', max_tokens: '400'}))")
    # The chat model (the cache may hold other chat models too).
    d.execute_script("localStorage.setItem('kiln.model', JSON.stringify('smollm2'))")
    d.refresh()
    step("the model picker lists the default model")
    wait(d, "smollm2 in the picker", lambda: "smollm2" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#model option")])
    embedders = embedding_models(url)
    if embedders:
        step(f"and leaves out the embedding models in the cache ({', '.join(embedders)})")
        listed = [o.text for o in d.find_elements(By.CSS_SELECTOR, "#model option")]
        assert not set(embedders) & set(listed), f"embedding models in the picker: {listed}"
    else:
        step("(no embedding model in the cache: `kiln pull all-minilm` adds one to check the picker leaves it out)")

    step("a message streams an answer in")
    # Every paint of the answer, seen by the page itself (polling from here
    # could miss a fast stream). The page paints once per animation frame and
    # once more when the stream ends; a busy headless browser may run few
    # frames, so the final paint counts too: one partial paint and the whole
    # answer is two lengths, and an answer shown only at the end is one.
    d.execute_script(
        "window.paints = []; new MutationObserver(() => {"
        "  const a = document.querySelectorAll(arguments[0]); const c = a.length && a[a.length - 1].querySelector('.content');"
        "  if (c) window.paints.push(c.textContent.length);"
        "}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});",
        ASSISTANT,
    )
    send(d, "Name three colors, as a list.")
    wait(d, "an assistant message", lambda: assistants(d))
    wait(d, "the answer to end", lambda: not streaming(d) and last_text(d))
    paints = sorted(set(n for n in d.execute_script("return window.paints") if n > 0))
    assert len(paints) >= 2, f"the answer came in one piece: {paints}"
    stats = last(d, ".stats")
    assert "prompt" in stats and "cached" in stats and "TTFT" in stats and "tok/s" in stats, stats
    d.save_screenshot(os.path.join(out, "chat.png"))

    step("Stop ends a generation")
    send(d, "Write a very long story about a dragon who learns to bake bread. Use many chapters.")
    wait(d, "the story to start", lambda: streaming(d) and len(last_text(d)) > 20)
    d.find_element(By.ID, "stop").click()
    wait(d, "the generation to stop", lambda: not streaming(d), timeout=10)
    text = last_text(d)
    assert "stopped" in last(d, ".stats"), last(d, ".stats")
    time.sleep(0.5)
    assert last_text(d) == text, "text kept arriving after Stop"

    step("a reload finds the conversation")
    d.refresh()
    wait(d, "the conversation restored", lambda: len(assistants(d)) == 2)
    convs = d.find_elements(By.CSS_SELECTOR, "#conversations .conv")
    assert len(convs) == 1 and convs[0].text.startswith("Name three colors"), [c.text for c in convs]
    assert last_text(d) == text

    step("regenerate replaces the last answer")
    d.find_elements(By.CSS_SELECTOR, "button[aria-label='Regenerate answer']")[-1].click()
    wait(d, "a new answer to start", lambda: streaming(d))
    d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Message']").send_keys(Keys.ESCAPE)
    wait(d, "Escape to stop it", lambda: not streaming(d), timeout=10)
    assert len(assistants(d)) == 2

    step("settings apply, and Enter sends")
    d.find_element(By.ID, "open-settings").click()
    d.find_element(By.ID, "set-system").send_keys("Answer in one word.")
    d.find_element(By.ID, "set-max_tokens").clear()
    d.find_element(By.ID, "set-max_tokens").send_keys("3")
    d.find_element(By.CSS_SELECTOR, "#settings button[value='save']").click()
    d.execute_script("window.firstMessage = document.querySelector('#messages article')")
    d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Message']").send_keys("Which color is the sky?", Keys.ENTER)
    wait(d, "a third answer", lambda: len(assistants(d)) == 3 and not streaming(d))
    # Earlier messages stay the same elements: the live region is not re-read.
    assert d.execute_script("return window.firstMessage === document.querySelector('#messages article')")
    stats = last(d, ".stats")
    assert re.search(r" [123] tokens? ", stats), stats

    step("editing a message answers it again")
    d.find_elements(By.CSS_SELECTOR, "button[aria-label='Edit message']")[-1].click()
    box = d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Edit message']")
    box.clear()
    box.send_keys("Which color is grass?")
    d.find_element(By.XPATH, "//button[text()='Save and send']").click()
    wait(d, "the edited turn answered", lambda: not streaming(d) and len(assistants(d)) == 3 and last(d, ".stats"))
    users = [e.text for e in d.find_elements(By.CSS_SELECTOR, "article[data-role='user'] .plain")]
    assert users[-1] == "Which color is grass?" and len(users) == 3, users


def markdown_is_safe(d, url, out):
    step("model output renders as markdown and cannot inject markup")
    evil = (
        "<img src=x onerror=\"window.pwned=1\"> **bold** and `<b>code</b>`\n\n"
        "[click](javascript:window.pwned=2) [ok](https://example.com/a?b=1&c=2)\n\n"
        "```python\nprint('<script>window.pwned=3</script>')\n```\n\n- one\n- two"
    )
    conv = {"id": "x1", "title": "markdown", "updated": 0, "messages": [
        {"role": "user", "content": "<i>not italic</i>"},
        {"role": "assistant", "content": evil, "reasoning": "thinking <u>hard</u>", "model": "smollm2",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    ]}
    d.execute_script("localStorage.setItem('kiln.conversations', arguments[0]); localStorage.setItem('kiln.current', '\"x1\"');", json.dumps([conv]))
    d.refresh()
    wait(d, "the injected conversation", lambda: len(assistants(d)) == 1)
    a = assistants(d)[0]
    assert not d.find_elements(By.CSS_SELECTOR, "#messages img, #messages script, #messages b, #messages i, #messages u")
    assert a.find_element(By.CSS_SELECTOR, "strong").text == "bold"
    assert [x.get_attribute("href") for x in a.find_elements(By.CSS_SELECTOR, "a")] == ["https://example.com/a?b=1&c=2"]
    assert "<script>" in a.find_element(By.CSS_SELECTOR, ".code code").text
    assert len(a.find_elements(By.CSS_SELECTOR, "li")) == 2
    details = a.find_element(By.CSS_SELECTOR, "details.reasoning")
    assert details.get_attribute("open") is None, "reasoning starts collapsed"
    assert "get_weather" in a.find_element(By.CSS_SELECTOR, "details.tool-call").text
    assert d.execute_script("return window.pwned") is None
    d.find_element(By.CSS_SELECTOR, ".code button.copy").click()
    d.save_screenshot(os.path.join(out, "markdown.png"))


def phone(d, url, out):
    step("phone width: the conversation list folds away")
    d.set_window_size(390, 844)
    d.get(url)
    wait(d, "the page", lambda: assistants(d))
    assert not d.find_element(By.ID, "new-chat").is_displayed() or d.find_element(By.ID, "sidebar").rect["x"] < 0
    width = d.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at phone width"
    d.save_screenshot(os.path.join(out, "phone.png"))
    d.find_element(By.ID, "open-sidebar").click()
    time.sleep(0.3)
    d.save_screenshot(os.path.join(out, "phone-sidebar.png"))


def api_key(kiln, out):
    step("a server with a key: the page asks for it")
    proc, url = start_server(kiln, ["--api-key", "sesame", "--no-warm-up"])
    d = browser(1000, 700)
    try:
        d.get(url)
        wait(d, "the key dialog", lambda: d.find_element(By.ID, "key-dialog").is_displayed())
        d.find_element(By.ID, "key-input").send_keys("sesame", Keys.ENTER)
        wait(d, "the models after the key", lambda: "smollm2" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#model option")])
    finally:
        d.quit()
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default="target/debug/kiln")
    ap.add_argument("--out", default="target/web-screenshots")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    proc, url = start_server(args.kiln)
    d = browser(1280, 800)
    try:
        chat(d, url, args.out)
        markdown_is_safe(d, url, args.out)
        phone(d, url, args.out)
    except Exception:
        d.save_screenshot(os.path.join(args.out, "failure.png"))
        raise
    finally:
        d.quit()
        proc.terminate()
        proc.wait()
    api_key(args.kiln, args.out)
    print(f"chat page test passed in {time.time() - t0:.1f} s; screenshots in {args.out}")


if __name__ == "__main__":
    main()
