import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { before, test } from 'node:test'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { Model, Reply, _writeTinyModel } = require('../index.js')

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
    },
  },
}
const ASK = [{ role: 'user', content: 'What is the weather in Paris?' }]
const SCHEMA = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 24 }, population_millions: { type: 'number' }, capital: { type: 'boolean' } },
  required: ['name', 'population_millions', 'capital'],
}
let tiny

before(async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'kiln-')), 'tiny.gguf')
  // Room for the tools preamble.
  _writeTinyModel(path, 4096)
  tiny = await Model.load(path, { threads: 1, ctxSize: 4096 })
})

function checkWeatherCall(call) {
  assert.ok(call.id.startsWith('call_'))
  assert.equal(call.name, 'get_weather')
  const args = JSON.parse(call.arguments)
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit'])
  assert.equal(typeof args.city, 'string')
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit))
  return args
}

function checkSchema(text) {
  const v = JSON.parse(text)
  assert.deepEqual(Object.keys(v).sort(), ['capital', 'name', 'population_millions'])
  assert.equal(typeof v.name, 'string')
  assert.equal(typeof v.population_millions, 'number')
  assert.equal(typeof v.capital, 'boolean')
  return v
}

test('a required call is parsed from a constrained answer', async () => {
  const r = await tiny.chatMessage(ASK, { tools: [WEATHER], toolChoice: 'required', maxTokens: 150 })
  assert.ok(r instanceof Reply)
  assert.equal(r.finishReason, 'tool_calls')
  assert.equal(r.toolCalls.length, 1)
  checkWeatherCall(r.toolCalls[0])
  assert.equal(r.content, '')
  assert.equal(r.reasoning, null)
  const m = r.toMessage()
  assert.equal(m.tool_calls[0].function.name, 'get_weather')
  const next = [...ASK, m, { role: 'tool', tool_call_id: r.toolCalls[0].id, content: '{"temperature": 21}' }]
  assert.equal(typeof (await tiny.chat(next, { maxTokens: 8 })), 'string')
})

test('streamed calls arrive on events', async () => {
  const whole = await tiny.chatMessage(ASK, { tools: [WEATHER], toolChoice: 'required', maxTokens: 150 })
  const calls = []
  let text = ''
  let last
  for await (const ev of tiny.chatStream(ASK, { tools: [WEATHER], toolChoice: 'required', maxTokens: 150 })) {
    calls.push(...(ev.toolCalls ?? []))
    text += ev.text
    last = ev
  }
  assert.deepEqual(calls.map((c) => [c.name, c.arguments]), whole.toolCalls.map((c) => [c.name, c.arguments]))
  assert.equal(text, '')
  assert.equal(last.finishReason, 'tool_calls')
})

test('json schema answers parse and match', async () => {
  const responseFormat = { type: 'json_schema', json_schema: { schema: SCHEMA } }
  checkSchema(await tiny.chat([{ role: 'user', content: 'Describe Paris as JSON.' }], { responseFormat, maxTokens: 150 }))
  checkSchema(await tiny.generate('Paris:', { responseFormat, maxTokens: 150 }))
})

test('shape errors name the option', async () => {
  assert.throws(() => tiny.chat(ASK, { tools: [WEATHER] }), { name: 'TypeError', message: /use `chatMessage`/ })
  assert.throws(() => tiny.generate('hi', { tools: [WEATHER] }), /unknown option `tools`/)
  await assert.rejects(tiny.chatMessage(ASK, { tools: [WEATHER], toolChoice: 'sometimes' }), {
    name: 'TypeError',
    message: /`toolChoice` must be none, auto, required/,
  })
  await assert.rejects(tiny.chatMessage(ASK, { tools: [WEATHER], toolChoice: { type: 'function', function: { name: 'nope' } } }), /`toolChoice` names "nope"/)
  await assert.rejects(tiny.chat(ASK, { responseFormat: { type: 'xml' } }), /`responseFormat` must be/)
  await assert.rejects(tiny.chatMessage(ASK, { tools: [{ type: 'function', function: { name: 'get weather' } }] }), /`tools\[0\].function.name` must be/)
  await assert.rejects(
    tiny.chatMessage(ASK, { tools: [WEATHER], toolChoice: 'required', responseFormat: { type: 'json_object' } }),
    /`responseFormat` and a required `toolChoice` cannot both constrain/,
  )
  assert.throws(() => tiny.chatMessage(ASK, { tools: WEATHER }), /`tools` must be an array/)
})

test('the default model calls a tool and writes JSON', async () => {
  const m = await Model.load('smollm2')
  const r = await m.chatMessage(ASK, { tools: [WEATHER], toolChoice: 'required', maxTokens: 100 })
  assert.equal(r.finishReason, 'tool_calls')
  assert.match(checkWeatherCall(r.toolCalls[0]).city, /paris/i)
  const v = checkSchema(
    await m.chat([{ role: 'user', content: 'Describe Paris as JSON.' }], {
      responseFormat: { type: 'json_schema', json_schema: { schema: SCHEMA } },
      maxTokens: 200,
    }),
  )
  assert.match(v.name, /paris/i)
})

test('reasoning comes back apart from the answer', async () => {
  // A thinking template in Qwen 3's manner: the generation prompt opens `<think>`.
  const thinking =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is false %}" +
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}"
  const path = join(mkdtempSync(join(tmpdir(), 'kiln-')), 'thinker.gguf')
  _writeTinyModel(path, 512, thinking)
  const m = await Model.load(path, { threads: 1 })
  const responseFormat = { type: 'grammar', grammar: 'start: "plan it" "</think>" "\\n\\n" "the answer"' }
  const r = await m.chatMessage(ASK, { responseFormat, maxTokens: 40 })
  assert.deepEqual([r.reasoning, r.content], ['plan it', 'the answer'])
  assert.equal(await m.chat(ASK, { responseFormat, maxTokens: 40 }), 'the answer')
  let reasoning = ''
  let text = ''
  for await (const ev of m.chatStream(ASK, { responseFormat, maxTokens: 40 })) {
    reasoning += ev.reasoning ?? ''
    text += ev.text
  }
  assert.deepEqual([reasoning, text], ['plan it', 'the answer'])
  const off = await m.chatMessage(ASK, {
    responseFormat: { type: 'grammar', grammar: 'start: "just this"' },
    chatTemplateKwargs: { enable_thinking: false },
    maxTokens: 20,
  })
  assert.deepEqual([off.reasoning, off.content], [null, 'just this'])
})
