'use strict'
// kiln for Node.js: the public API over the native module (native.js,
// written by `npm run build`). See index.d.ts and docs/bindings.md.

const native = require('./native.js')

const GEN_OPTIONS = {
  maxTokens: 'integer',
  temperature: 'number',
  topP: 'number',
  topK: 'integer',
  minP: 'number',
  seed: 'integer',
  stop: 'strings',
  logprobs: 'boolean',
  ignoreEos: 'boolean',
  responseFormat: 'object',
  segments: 'strings',
  signal: 'signal',
}
const CHAT_OPTIONS = {
  ...GEN_OPTIONS,
  tools: 'array',
  toolChoice: 'choice',
  parallelToolCalls: 'boolean',
  reasoningEffort: 'string',
  chatTemplateKwargs: 'object',
}
const LOAD_OPTIONS = { device: 'string', threads: 'integer', ctxSize: 'integer' }
const EMBED_OPTIONS = { dimensions: 'integer', truncate: 'boolean', signal: 'signal' }

function checkType(name, kind, v) {
  const ok = {
    integer: () => Number.isInteger(v),
    number: () => typeof v === 'number',
    string: () => typeof v === 'string',
    boolean: () => typeof v === 'boolean',
    object: () => typeof v === 'object',
    array: () => Array.isArray(v),
    choice: () => typeof v === 'string' || typeof v === 'object',
    strings: () => Array.isArray(v) && v.every((s) => typeof s === 'string'),
    signal: () => typeof v === 'object' && typeof v.aborted === 'boolean',
  }[kind]()
  if (!ok) {
    const what =
      {
        integer: 'an integer',
        array: 'an array',
        choice: 'a string or an object',
        strings: 'an array of strings',
        signal: 'an AbortSignal',
      }[kind] ?? `a ${kind}`
    throw new TypeError(`\`${name}\` must be ${what}, got ${JSON.stringify(v) ?? String(v)}`)
  }
}

// Refuses unknown keys and wrong types; returns the options without `signal`
// (a string `stop` becomes a one-element array).
function checkOptions(opts, known) {
  if (opts === undefined || opts === null) return [{}, undefined]
  if (typeof opts !== 'object') throw new TypeError('options must be an object')
  const out = {}
  let signal
  for (const [k, v] of Object.entries(opts)) {
    if (!(k in known)) throw new TypeError(`unknown option \`${k}\` (known: ${Object.keys(known).join(', ')})`)
    if (v === undefined || v === null) continue
    const value = k === 'stop' && typeof v === 'string' ? [v] : v
    checkType(k, known[k], value)
    if (k === 'signal') signal = value
    else out[k] = value
  }
  return [out, signal]
}

// Native errors with status InvalidArg are the caller's mistake.
function rethrow(e) {
  if (e && e.code === 'InvalidArg') {
    const t = new TypeError(e.message)
    t.code = e.code
    throw t
  }
  throw e
}

function abortError(signal) {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

// Cancels `stream` when `signal` aborts; returns the detach function.
function onAbort(signal, stream) {
  if (!signal) return () => {}
  const cancel = () => stream.cancel()
  if (signal.aborted) cancel()
  signal.addEventListener('abort', cancel, { once: true })
  return () => signal.removeEventListener('abort', cancel)
}

// Submits on the first `next()`: a stream never iterated costs nothing.
// The native stream pushes each event to a callback; the generator takes
// them from a queue, waiting only when it is empty.
async function* events(submit, signal) {
  if (signal?.aborted) throw abortError(signal)
  const stream = await submit().catch(rethrow)
  const detach = onAbort(signal, stream)
  const queue = []
  let failure = null
  let wake = null
  stream.start((err, ev) => {
    if (err) failure = err
    else queue.push(ev)
    if (wake) wake()
  })
  try {
    for (;;) {
      if (queue.length === 0) {
        if (failure) rethrow(failure)
        await new Promise((resolve) => (wake = resolve))
        wake = null
        continue
      }
      const ev = queue.shift()
      if (ev === null || ev === undefined) return
      if (ev.eos && signal?.aborted) throw abortError(signal)
      yield ev
      if (ev.eos) return
    }
  } finally {
    detach()
    stream.cancel()
  }
}

// Runs `work` (a native promise) unless `signal` aborts first.
async function guarded(work, signal) {
  if (signal?.aborted) throw abortError(signal)
  const result = await work().catch(rethrow)
  if (signal?.aborted) throw abortError(signal)
  return result
}

async function collect(submit, signal) {
  if (signal?.aborted) throw abortError(signal)
  const stream = await submit().catch(rethrow)
  const detach = onAbort(signal, stream)
  try {
    const reply = await stream.collect()
    if (signal?.aborted) throw abortError(signal)
    return reply
  } finally {
    detach()
  }
}

/** A whole chat answer: `content`, `reasoning`, `toolCalls`, `finishReason`, token counts. */
class Reply {
  constructor(r) {
    this.content = r.content
    this.reasoning = r.reasoning ?? null
    this.toolCalls = r.toolCalls
    this.finishReason = r.finishReason
    this.promptTokens = r.promptTokens
    this.completionTokens = r.completionTokens
  }

  /** The answer as an assistant message to append to the conversation (OpenAI's shape). */
  toMessage() {
    const m = { role: 'assistant', content: this.content }
    if (this.toolCalls.length > 0) {
      m.tool_calls = this.toolCalls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.name, arguments: c.arguments },
      }))
    }
    return m
  }
}

// Prompts up to this many characters are templated and tokenized on the
// calling thread: that takes less than handing the work to another thread
// and the result back, two hand-offs that each wait for a free core (the
// server inlines the same way). Longer ones go to a tokio thread, so the
// event loop never waits on them.
const INLINE_PROMPT_CHARS = 32 << 10

function promptChars(p) {
  return typeof p === 'string' ? p.length : 0
}

function messagesChars(messages) {
  if (!Array.isArray(messages)) return 0
  let n = 0
  for (const m of messages) n += typeof m?.content === 'string' ? m.content.length : 0
  return n
}

// Runs `now` at once when the input is short, else `later` (a promise); a
// promise either way.
function submitter(chars, now, later) {
  if (chars > INLINE_PROMPT_CHARS) return later
  return () => {
    try {
      return Promise.resolve(now())
    } catch (e) {
      return Promise.reject(e)
    }
  }
}

function textOnly(o, method) {
  if (o.tools !== undefined) {
    throw new TypeError(`\`${method}\` returns text only; use \`chatMessage\` (or \`chatStream\`) to offer \`tools\``)
  }
}

class Model {
  #native

  /** Use `await Model.load(name, opts)`. */
  constructor(nativeModel) {
    if (!(nativeModel instanceof native.NativeModel)) throw new TypeError('use `await Model.load(name, options)`')
    this.#native = nativeModel
  }

  #raw(prompt, o) {
    const n = this.#native
    return submitter(promptChars(prompt), () => n.submitNow(prompt, o), () => n.submit(prompt, o))
  }

  #chat(messages, o) {
    const n = this.#native
    return submitter(messagesChars(messages), () => n.submitChatNow(messages, o), () => n.submitChat(messages, o))
  }

  static async load(name = 'smollm2', opts) {
    if (typeof name !== 'string') throw new TypeError('`name` must be a string')
    const [o] = checkOptions(opts, LOAD_OPTIONS)
    return new Model(await native.load(name, o).catch(rethrow))
  }

  get name() {
    return this.#native.name
  }

  get ctxSize() {
    return this.#native.ctxSize
  }

  /** `generate`, `embed` or `rerank`: what the model does. */
  get kind() {
    return this.#native.kind
  }

  /** Width of an embedding model's vectors (`null` for a text generation model). */
  get dimensions() {
    return this.#native.dimensions ?? null
  }

  generate(prompt, opts) {
    const [o, signal] = checkOptions(opts, GEN_OPTIONS)
    return collect(this.#raw(prompt, o), signal).then((r) => r.content)
  }

  stream(prompt, opts) {
    const [o, signal] = checkOptions(opts, GEN_OPTIONS)
    return events(this.#raw(prompt, o), signal)
  }

  chat(messages, opts) {
    const [o, signal] = checkOptions(opts, CHAT_OPTIONS)
    textOnly(o, 'chat')
    return collect(this.#chat(messages, o), signal).then((r) => r.content)
  }

  chatMessage(messages, opts) {
    const [o, signal] = checkOptions(opts, CHAT_OPTIONS)
    return collect(this.#chat(messages, o), signal).then((r) => new Reply(r))
  }

  chatStream(messages, opts) {
    const [o, signal] = checkOptions(opts, CHAT_OPTIONS)
    return events(this.#chat(messages, o), signal)
  }

  embed(texts, opts) {
    const one = typeof texts === 'string'
    if (!one && !(Array.isArray(texts) && texts.every((t) => typeof t === 'string'))) {
      throw new TypeError('`texts` must be a string or an array of strings')
    }
    const [o, signal] = checkOptions(opts, EMBED_OPTIONS)
    return guarded(() => this.#native.embed(one ? [texts] : texts, o), signal).then((v) => (one ? v[0] : v))
  }

  rerank(query, documents, opts) {
    if (typeof query !== 'string') throw new TypeError('`query` must be a string')
    if (!(Array.isArray(documents) && documents.every((t) => typeof t === 'string'))) {
      throw new TypeError('`documents` must be an array of strings')
    }
    const [o, signal] = checkOptions(opts, { truncate: 'boolean', signal: 'signal' })
    return guarded(() => this.#native.rerank(query, documents, o.truncate), signal)
  }

  tokenize(text, opts) {
    const [o] = checkOptions(opts, { addSpecial: 'boolean' })
    try {
      return this.#native.tokenize(text, o.addSpecial)
    } catch (e) {
      rethrow(e)
    }
  }

  detokenize(ids) {
    try {
      return this.#native.detokenize(ids)
    } catch (e) {
      rethrow(e)
    }
  }

  /** The engine measured as `kiln bench` does, in this process (bench.mjs). */
  _benchEngine(prompts, genLen, seed) {
    return this.#native._benchEngine(prompts, genLen, seed)
  }

  /** Engine counters for tests: [running, waiting, kvBlocksUsed]. */
  _stats() {
    return this.#native._stats()
  }
}

module.exports = { Model, Reply, _writeTinyModel: native._writeTinyModel, _writeTinyEncoder: native._writeTinyEncoder }
