// kiln's chat page: talks to the server's OpenAI routes (/v1/models,
// /v1/chat/completions with streaming; /api/show to leave embedding models
// out of the picker) and keeps conversations in the
// browser's localStorage. No build step, no network beyond this server.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const md = window.kilnMarkdown;
  const KEYS = { convs: "kiln.conversations", current: "kiln.current", settings: "kiln.settings", model: "kiln.model", key: "kiln.apiKey" };
  const NUMERIC = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];

  const load = (k, fallback) => {
    try {
      const v = JSON.parse(localStorage.getItem(k));
      return v === null ? fallback : v;
    } catch (e) {
      return fallback;
    }
  };
  const store = (k, v) => {
    try {
      localStorage.setItem(k, JSON.stringify(v));
    } catch (e) {
      notice("Could not save in the browser's storage: " + e.message);
    }
  };

  const S = {
    convs: [].concat(load(KEYS.convs, [])).filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages)),
    current: load(KEYS.current, null),
    settings: load(KEYS.settings, { system: "" }),
    key: load(KEYS.key, ""),
    abort: null,
    streaming: null,
  };

  function notice(text) {
    const n = $("notice");
    n.textContent = text || "";
    n.hidden = !text;
  }

  // --- the server -------------------------------------------------------
  function headers() {
    const h = { "Content-Type": "application/json" };
    if (S.key) h.Authorization = "Bearer " + S.key;
    return h;
  }

  async function api(path, init) {
    for (let attempt = 0; ; attempt++) {
      const resp = await fetch(path, Object.assign({}, init, { headers: headers() }));
      if (resp.status !== 401 || attempt > 0) return resp;
      await askKey();
    }
  }

  function askKey() {
    return new Promise((resolve) => {
      const d = $("key-dialog");
      $("key-input").value = S.key;
      d.addEventListener("close", () => {
        S.key = $("key-input").value.trim();
        store(KEYS.key, S.key);
        resolve();
      }, { once: true });
      d.showModal();
    });
  }

  async function errorText(resp) {
    try {
      const j = await resp.json();
      return (j.error && (j.error.message || j.error)) || resp.statusText;
    } catch (e) {
      return resp.status + " " + resp.statusText;
    }
  }

  // Models that can chat: /v1/models also lists embedding models, which
  // answer a chat with a 400. /api/show says what each can do; a model it
  // cannot describe stays listed.
  async function chatModels(ids) {
    const canChat = await Promise.all(ids.map(async (id) => {
      try {
        const resp = await api("/api/show", { method: "POST", body: JSON.stringify({ model: id }) });
        if (!resp.ok) return true;
        const caps = (await resp.json()).capabilities || [];
        return caps.includes("completion") || !caps.includes("embedding");
      } catch (e) {
        return true;
      }
    }));
    return ids.filter((_, i) => canChat[i]);
  }

  async function loadModels() {
    const sel = $("model");
    try {
      const resp = await api("/v1/models");
      if (!resp.ok) throw new Error(await errorText(resp));
      const ids = await chatModels((await resp.json()).data.map((m) => m.id));
      sel.replaceChildren(...ids.map((id) => new Option(id, id)));
      const want = load(KEYS.model, null);
      if (want && ids.includes(want)) sel.value = want;
      if (!ids.length) notice("No models yet: run `kiln pull smollm2`, then reload this page.");
    } catch (e) {
      notice("Could not list the models: " + e.message);
    }
  }

  // --- conversations ----------------------------------------------------
  const conv = () => S.convs.find((c) => c.id === S.current) || null;
  const save = () => {
    store(KEYS.convs, S.convs);
    store(KEYS.current, S.current);
  };

  function newConversation() {
    stop();
    S.current = null;
    save();
    render();
    $("input").focus();
  }

  function ensureConversation(firstText) {
    let c = conv();
    if (!c) {
      c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: firstText.slice(0, 48), messages: [], updated: Date.now() };
      S.convs.unshift(c);
      S.current = c.id;
    }
    return c;
  }

  function renderConversations() {
    const ul = $("conversations");
    ul.replaceChildren(...S.convs.map((c) => {
      const li = document.createElement("li");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "conv";
      open.textContent = c.title || "Untitled";
      if (c.id === S.current) open.setAttribute("aria-current", "true");
      open.addEventListener("click", () => {
        stop();
        S.current = c.id;
        save();
        render();
        closeSidebar();
      });
      const del = document.createElement("button");
      del.type = "button";
      del.className = "icon";
      del.textContent = "×";
      del.setAttribute("aria-label", "Delete conversation " + (c.title || ""));
      del.addEventListener("click", () => {
        if (c.id === S.current) stop();
        S.convs = S.convs.filter((x) => x !== c);
        if (S.current === c.id) S.current = null;
        save();
        render();
      });
      li.append(open, del);
      return li;
    }));
  }

  // --- messages ---------------------------------------------------------
  function button(label, onClick, aria) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    if (aria) b.setAttribute("aria-label", aria);
    b.addEventListener("click", onClick);
    return b;
  }

  function statsText(m) {
    const s = m.stats;
    if (!s) return m.stopped ? "stopped" : "";
    const parts = [];
    if (s.prompt_tokens != null) parts.push(`prompt ${s.prompt_tokens} tokens (${s.cached_tokens || 0} cached)`);
    if (s.ttft_ms != null) parts.push(`TTFT ${Math.round(s.ttft_ms)} ms`);
    if (s.completion_tokens != null) parts.push(s.completion_tokens === 1 ? "1 token" : `${s.completion_tokens} tokens`);
    if (s.tok_s != null) parts.push(`${s.tok_s.toFixed(1)} tok/s`);
    if (m.stopped) parts.push("stopped");
    return parts.join(" · ");
  }

  function fillMessage(el, m) {
    const body = el.querySelector(".body");
    // A repaint while streaming keeps the reasoning open if it was opened.
    const open = Boolean(body.querySelector("details.reasoning[open]"));
    body.replaceChildren();
    if (m.reasoning) {
      const d = document.createElement("details");
      d.className = "reasoning";
      d.open = open;
      const s = document.createElement("summary");
      s.textContent = "Reasoning";
      const div = document.createElement("div");
      div.className = "md";
      div.innerHTML = md.render(m.reasoning);
      d.append(s, div);
      body.append(d);
    }
    if (m.role === "user") {
      const p = document.createElement("div");
      p.className = "plain";
      p.textContent = m.content;
      body.append(p);
    } else {
      const div = document.createElement("div");
      div.className = "md content";
      div.innerHTML = md.render(m.content || "");
      body.append(div);
    }
    for (const call of m.tool_calls || []) {
      const d = document.createElement("details");
      d.className = "tool-call";
      d.open = true;
      const s = document.createElement("summary");
      s.textContent = "Tool call: " + ((call.function && call.function.name) || "?");
      const pre = document.createElement("pre");
      pre.textContent = (call.function && call.function.arguments) || "";
      d.append(s, pre);
      body.append(d);
    }
    if (m.error) {
      const e = document.createElement("p");
      e.className = "error";
      e.textContent = m.error;
      body.append(e);
    }
    el.querySelector(".stats").textContent = m.role === "assistant" ? statsText(m) : "";
  }

  function messageElement(c, m, i) {
    const el = document.createElement("article");
    el.className = "msg " + m.role;
    el.dataset.role = m.role;
    const head = document.createElement("div");
    head.className = "who";
    head.textContent = m.role === "user" ? "You" : m.model || "assistant";
    const body = document.createElement("div");
    body.className = "body";
    const stats = document.createElement("div");
    stats.className = "stats";
    const actions = document.createElement("div");
    actions.className = "actions";
    actions.append(button("Copy", () => copyText(m.content, actions.firstChild), "Copy message"));
    if (m.role === "user") actions.append(button("Edit", () => edit(el, c, i), "Edit message"));
    if (m.role === "assistant") actions.append(button("Regenerate", () => regenerate(c, i), "Regenerate answer"));
    el.append(head, body, stats, actions);
    fillMessage(el, m);
    return el;
  }

  // Each message's element, so that a render keeps what is on screen: the
  // conversation is a live region, and replacing its elements would have a
  // screen reader read it all again.
  const elements = new WeakMap();

  function render() {
    renderConversations();
    const box = $("messages");
    const c = conv();
    const msgs = c ? c.messages : [];
    if (box.dataset.conv !== (c ? c.id : "")) {
      box.replaceChildren();
      box.dataset.conv = c ? c.id : "";
    }
    const kids = Array.from(box.children);
    let i = 0;
    while (i < kids.length && i < msgs.length && elements.get(msgs[i]) === kids[i]) i++;
    for (const k of kids.slice(i)) k.remove();
    for (; i < msgs.length; i++) {
      const el = messageElement(c, msgs[i], i);
      elements.set(msgs[i], el);
      box.append(el);
    }
    box.scrollTop = box.scrollHeight;
  }

  function edit(el, c, i) {
    if (S.streaming) return;
    const body = el.querySelector(".body");
    const ta = document.createElement("textarea");
    ta.value = c.messages[i].content;
    ta.setAttribute("aria-label", "Edit message");
    ta.rows = 3;
    const row = document.createElement("div");
    row.className = "row";
    row.append(
      button("Save and send", () => {
        const text = ta.value.trim();
        if (!text) return;
        c.messages = c.messages.slice(0, i);
        c.messages.push({ role: "user", content: text });
        generate(c);
      }),
      button("Cancel", () => fillMessage(el, c.messages[i])),
    );
    body.replaceChildren(ta, row);
    ta.focus();
  }

  // Drops answer `i` (and what follows it) and answers again.
  function regenerate(c, i) {
    if (S.streaming) return;
    c.messages = c.messages.slice(0, i);
    while (c.messages.length && c.messages[c.messages.length - 1].role === "assistant") c.messages.pop();
    if (c.messages.length) generate(c);
  }

  async function copyText(text, btn) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) {
      // Not a secure context (plain HTTP to another host): the old way.
      const ta = document.createElement("textarea");
      ta.value = text;
      document.body.append(ta);
      ta.select();
      document.execCommand("copy");
      ta.remove();
    }
    if (btn) {
      const was = btn.textContent;
      btn.textContent = "Copied";
      setTimeout(() => (btn.textContent = was), 1200);
    }
  }

  // --- generating -------------------------------------------------------
  function requestBody(c, model) {
    const messages = [];
    if (S.settings.system && S.settings.system.trim()) messages.push({ role: "system", content: S.settings.system });
    for (const m of c.messages) {
      if (m.role === "assistant" && !m.content && m.error) continue;
      messages.push({ role: m.role, content: m.content || "" });
    }
    const body = { model, messages, stream: true, stream_options: { include_usage: true } };
    for (const k of NUMERIC) {
      const v = S.settings[k];
      if (v !== undefined && v !== null && v !== "") body[k] = Number(v);
    }
    return body;
  }

  function setBusy(busy) {
    $("send").hidden = busy;
    $("stop").hidden = !busy;
  }

  function stop() {
    if (S.abort) S.abort.abort();
  }

  // Reads server-sent events, handing each JSON event to `onEvent`.
  async function readStream(resp, onEvent) {
    if (!resp.ok) throw new Error(await errorText(resp));
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const ev = JSON.parse(data);
        if (ev.error) throw new Error(ev.error.message || String(ev.error));
        onEvent(ev);
      }
    }
  }

  async function generate(c) {
    const model = $("model").value;
    if (!model) {
      notice("No model to send to: run `kiln pull smollm2`, then reload this page.");
      return;
    }
    notice("");
    const body = requestBody(c, model);
    const m = { role: "assistant", content: "", reasoning: "", tool_calls: [], model };
    c.messages.push(m);
    c.updated = Date.now();
    save();
    render();
    const el = elements.get(m);
    el.setAttribute("aria-busy", "true");
    const ctl = new AbortController();
    S.abort = ctl;
    S.streaming = m;
    setBusy(true);
    const t0 = performance.now();
    let tFirst = null;
    let usage = null;
    let pending = false;
    let retry = false;
    const paint = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        fillMessage(el, m);
        const box = $("messages");
        box.scrollTop = box.scrollHeight;
      });
    };
    try {
      const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: ctl.signal });
      if (resp.status === 401) {
        c.messages.pop();
        retry = true;
      }
      if (!retry) {
        await readStream(resp, (ev) => {
          if (ev.usage) usage = ev.usage;
          const d = ev.choices && ev.choices[0] && ev.choices[0].delta;
          if (!d) return;
          if (d.content || d.reasoning_content || (d.tool_calls && d.tool_calls.length)) tFirst = tFirst || performance.now();
          if (d.content) m.content += d.content;
          if (d.reasoning_content) m.reasoning += d.reasoning_content;
          for (const tc of d.tool_calls || []) {
            const slot = (m.tool_calls[tc.index || 0] = m.tool_calls[tc.index || 0] || { id: tc.id, type: "function", function: { name: "", arguments: "" } });
            if (tc.function && tc.function.name) slot.function.name += tc.function.name;
            if (tc.function && tc.function.arguments) slot.function.arguments += tc.function.arguments;
          }
          paint();
        });
      }
    } catch (e) {
      if (e.name === "AbortError") m.stopped = true;
      else m.error = "Error: " + e.message;
    } finally {
      const tEnd = performance.now();
      m.stats = {
        ttft_ms: tFirst != null ? tFirst - t0 : null,
        prompt_tokens: usage ? usage.prompt_tokens : null,
        cached_tokens: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : null,
        completion_tokens: usage ? usage.completion_tokens : null,
        tok_s: usage && tFirst != null && usage.completion_tokens > 1 && tEnd > tFirst ? (usage.completion_tokens - 1) / ((tEnd - tFirst) / 1000) : null,
      };
      m.tool_calls = m.tool_calls.filter(Boolean);
      S.abort = null;
      S.streaming = null;
      setBusy(false);
      c.updated = Date.now();
      save();
      el.removeAttribute("aria-busy");
      fillMessage(el, m);
      if (retry) render();
      $("input").focus();
    }
    if (retry) {
      await askKey();
      generate(c);
    }
  }

  function send(text) {
    if (S.streaming || !text.trim()) return;
    const c = ensureConversation(text.trim());
    c.messages.push({ role: "user", content: text.trim() });
    $("input").value = "";
    generate(c);
  }

  // --- settings, sidebar, keys -----------------------------------------
  function openSettings() {
    $("set-system").value = S.settings.system || "";
    for (const k of NUMERIC) $("set-" + k).value = S.settings[k] ?? "";
    $("set-key").value = S.key;
    $("settings").showModal();
  }

  function closeSettings() {
    if ($("settings").returnValue !== "save") return;
    S.settings.system = $("set-system").value;
    for (const k of NUMERIC) S.settings[k] = $("set-" + k).value;
    store(KEYS.settings, S.settings);
    S.key = $("set-key").value.trim();
    store(KEYS.key, S.key);
    loadModels();
  }

  function closeSidebar() {
    document.body.classList.remove("sidebar-open");
    $("open-sidebar").setAttribute("aria-expanded", "false");
  }

  function init() {
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      send($("input").value);
    });
    $("input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send($("input").value);
      }
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && S.streaming) stop();
    });
    $("stop").addEventListener("click", stop);
    $("new-chat").addEventListener("click", newConversation);
    $("open-settings").addEventListener("click", openSettings);
    $("settings").addEventListener("close", closeSettings);
    $("model").addEventListener("change", () => store(KEYS.model, $("model").value));
    $("open-sidebar").addEventListener("click", () => {
      document.body.classList.add("sidebar-open");
      $("open-sidebar").setAttribute("aria-expanded", "true");
      $("new-chat").focus();
    });
    $("close-sidebar").addEventListener("click", closeSidebar);
    // At phone width the list is an overlay: a click beside it closes it.
    document.querySelector("main").addEventListener("click", (e) => {
      if (document.body.classList.contains("sidebar-open") && !e.target.closest("#open-sidebar")) closeSidebar();
    });
    // Copy buttons of code blocks (rendered markdown has no handlers of its own).
    $("messages").addEventListener("click", (e) => {
      const b = e.target.closest("button.copy");
      if (!b) return;
      const code = b.closest(".code").querySelector("code");
      copyText(code.textContent, b);
    });
    render();
    loadModels();
    $("input").focus();
  }

  init();
})();
