// Decode tok/s and TTFT through the Node.js binding, measured as `kiln bench`
// measures the engine: each iteration runs --streams generations at once on
// fresh random prompts of --prompt-len tokens (EOS ignored, --gen-len tokens
// each), every one read by its own `for await` loop. TTFT is submission to the
// first token; decode tok/s counts the tokens after the first over the time
// from the first to the last. Every iteration through the binding is paired
// with one of the engine measured as `kiln bench` measures it (Rust threads
// reading the same engine in this process), in alternating order, so the two
// see the same load. Prints medians over every stream of every measured
// iteration as JSON (`kiln bench --json`'s names; `engine_*` for the paired
// engine runs).
//
//   node bindings/node/bench.mjs smollm2 --prompt-len 128 --gen-len 128 --streams 16
import { createRequire } from 'node:module'
import { parseArgs } from 'node:util'

const { Model } = createRequire(import.meta.url)('./index.js')

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'prompt-len': { type: 'string', default: '128' },
    'gen-len': { type: 'string', default: '128' },
    iterations: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    streams: { type: 'string', default: '1' },
    threads: { type: 'string' },
    seed: { type: 'string', default: '42' },
  },
})
const [promptLen, genLen, iterations, warmup, streams, seed] = ['prompt-len', 'gen-len', 'iterations', 'warmup', 'streams', 'seed'].map((k) => Number(a[k]))
const model = positionals[0] ?? 'smollm2'

// A small seeded generator (mulberry32) for prompts.
let state = seed >>> 0
function rand() {
  state = (state + 0x6d2b79f5) >>> 0
  let t = state
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const WORDS = ['time', 'river', 'blue', 'seven', 'market', 'quiet', 'engine', 'paper', 'north', 'garden', 'light', 'stone']

function randomPrompt(m) {
  let ids = []
  while (ids.length < promptLen) {
    const words = Array.from({ length: promptLen }, () => WORDS[Math.floor(rand() * WORDS.length)] + Math.floor(rand() * 1000))
    ids = m.tokenize(words.join(' '), { addSpecial: false })
  }
  return ids.slice(0, promptLen)
}

async function measure(m, prompt, opts) {
  const arrivals = []
  const start = performance.now()
  for await (const ev of m.stream(prompt, opts)) if (!ev.eos) arrivals.push(performance.now())
  const decodeMs = arrivals.at(-1) - arrivals[0]
  return { ttftMs: arrivals[0] - start, decodeTokS: decodeMs > 0 ? ((arrivals.length - 1) * 1e3) / decodeMs : 0, gen: arrivals.length }
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y)
  const mid = s.length >> 1
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}

const m = await Model.load(model, a.threads ? { threads: Number(a.threads) } : undefined)
const opts = { maxTokens: genLen, ignoreEos: true, seed }
const iteration = () => {
  const prompts = Array.from({ length: streams }, () => randomPrompt(m))
  return Promise.all(prompts.map((p) => measure(m, p, opts)))
}
const engine = async () => {
  const got = await m._benchEngine(Array.from({ length: streams }, () => randomPrompt(m)), genLen, seed)
  return got.map((s) => ({ ttftMs: s.ttftMs, decodeTokS: s.decodeTokS, gen: s.tokens }))
}
for (let i = 0; i < warmup; i++) {
  await engine()
  await iteration()
}
const samples = []
const engineSamples = []
for (let i = 0; i < iterations; i++) {
  if (i % 2) {
    samples.push(...(await iteration()))
    engineSamples.push(...(await engine()))
  } else {
    engineSamples.push(...(await engine()))
    samples.push(...(await iteration()))
  }
}
if (![...samples, ...engineSamples].every((s) => s.gen === genLen)) throw new Error('every generation must run to --gen-len')
console.log(JSON.stringify({
  binding: 'node',
  model,
  streams,
  prompt_tokens: promptLen,
  gen_tokens: genLen,
  iterations,
  ttft_ms: median(samples.map((s) => s.ttftMs)),
  decode_tok_s: median(samples.map((s) => s.decodeTokS)),
  engine_ttft_ms: median(engineSamples.map((s) => s.ttftMs)),
  engine_decode_tok_s: median(engineSamples.map((s) => s.decodeTokS)),
}))
