import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { before, test } from 'node:test'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { Model, _writeTinyEncoder, _writeTinyModel } = require('../index.js')
const here = dirname(fileURLToPath(import.meta.url))
let encoder, reranker, tiny

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-'))
  _writeTinyEncoder(join(dir, 'enc'))
  _writeTinyEncoder(join(dir, 'rank'), true)
  _writeTinyModel(join(dir, 'tiny.gguf'))
  encoder = await Model.load(join(dir, 'enc'), { threads: 1 })
  reranker = await Model.load(join(dir, 'rank'), { threads: 1 })
  tiny = await Model.load(join(dir, 'tiny.gguf'), { threads: 1 })
})

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0))
const cosine = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b))

test('embed one text or many', async () => {
  assert.equal(encoder.kind, 'embed')
  assert.equal(encoder.dimensions, 64)
  const one = await encoder.embed('hello world')
  assert.ok(one instanceof Float32Array)
  assert.equal(one.length, 64)
  assert.ok(Math.abs(norm(one) - 1) < 1e-5)
  const many = await encoder.embed(['hello world', 'a b c'], { truncate: true })
  assert.equal(many.length, 2)
  assert.ok(many[0].every((x, i) => Math.abs(x - one[i]) < 1e-6), 'batched equals alone')
  const cut = await encoder.embed(['hello world'], { dimensions: 8 })
  assert.equal(cut[0].length, 8)
  assert.ok(Math.abs(norm(cut[0]) - 1) < 1e-5)
})

test('embedding errors', async () => {
  await assert.rejects(encoder.embed('hi', { dimensions: 0 }), { name: 'TypeError', message: /`dimensions` must be between 1 and 64, got 0/ })
  await assert.rejects(encoder.embed(['hi', '']), /text 1 is empty/)
  await assert.rejects(encoder.embed('hello '.repeat(100), { truncate: false }), /context holds|longer/)
  assert.throws(() => encoder.embed(3), /`texts` must be a string or an array of strings/)
  assert.throws(() => encoder.embed('hi', { dims: 3 }), /unknown option `dims`/)
  await assert.rejects(encoder.generate('hi'), { name: 'TypeError', message: /`generate` needs a text generation model.*use `embed`/ })
  await assert.rejects(tiny.embed('hi'), /`embed` needs an embedding model/)
  await assert.rejects(encoder.rerank('q', ['d']), /`rerank` needs a reranker/)
  await assert.rejects(encoder.embed('hi', { signal: AbortSignal.abort() }), { name: 'AbortError' })
  assert.equal(tiny.dimensions, null)
})

test('rerank best first', async () => {
  assert.equal(reranker.kind, 'rerank')
  const ranked = await reranker.rerank('hello', ['a b', 'hello world', 'c'])
  assert.deepEqual(ranked.map((r) => r.index).sort(), [0, 1, 2])
  assert.ok(ranked.every((r, i) => i === 0 || ranked[i - 1].score >= r.score))
  await assert.rejects(reranker.rerank('hello', []), /`documents` must not be empty/)
})

test('all-minilm matches the engine\'s vectors', async () => {
  // `kiln embed all-minilm` (the engine's Embedder) on the same texts.
  const expected = JSON.parse(readFileSync(join(here, '../../python/tests/data/minilm_vectors.json'), 'utf8'))
  const m = await Model.load('all-minilm')
  assert.equal(m.dimensions, 384)
  const got = await m.embed(Object.keys(expected))
  Object.values(expected).forEach((e, i) => assert.ok(cosine(got[i], e) > 0.99999, Object.keys(expected)[i]))
  const [food, bread, market] = got
  assert.ok(cosine(food, bread) > cosine(food, market) + 0.3)
})
