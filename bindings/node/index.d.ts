/** kiln for Node.js: a model running in this process (no server). */

/** How to load a model. */
export interface LoadOptions {
  /** `cpu` (default), `cuda` or `cuda:N`. */
  device?: string
  /** Kernel threads (default: all cores). */
  threads?: number
  /** Context length (default: the model's, capped at 4096). */
  ctxSize?: number
}

/** How to generate. Unknown keys are a TypeError. */
export interface GenerateOptions {
  /** Most tokens to generate (default 256, at least 1). */
  maxTokens?: number
  /** 0 (the default) is greedy. */
  temperature?: number
  topP?: number
  topK?: number
  minP?: number
  seed?: number
  /** Strings that end the generation (not included in the text). */
  stop?: string | string[]
  /** Fill `Event.logprob` (off by default: it costs a little per token). */
  logprobs?: boolean
  ignoreEos?: boolean
  /** `{ type: 'json_object' }` or `{ type: 'json_schema', json_schema: { schema } }`. */
  responseFormat?: Record<string, unknown>
  /** Aborting cancels the request and frees its KV cache; the promise or iterator rejects with `signal.reason`. */
  signal?: AbortSignal
}

/** A chat message (OpenAI's shape). */
export interface Message {
  role: string
  content: string
  tool_calls?: Array<Record<string, unknown>>
  tool_call_id?: string
  name?: string
}

/** A generated token (`eos` false), or the last event of a stream (`eos` true, no `id`). */
export interface Event {
  id?: number
  text: string
  /** With `logprobs: true`. */
  logprob?: number
  eos: boolean
  /** On the last event: `stop`, `length` or `cancelled`. */
  finishReason?: string
}

/** A raw prompt: text, or token ids. */
export type Prompt = string | number[]

export declare class Model {
  private constructor()
  /** Loads `name` (`smollm2`, a `.gguf` file, a Hugging Face directory or `hf:org/repo`, fetched into the cache if needed). */
  static load(name?: string, options?: LoadOptions): Promise<Model>
  readonly name: string
  readonly ctxSize: number
  /** The completion of a raw prompt (no chat template). */
  generate(prompt: Prompt, options?: GenerateOptions): Promise<string>
  /** Its events; leaving the loop early cancels the request and frees its KV cache. */
  stream(prompt: Prompt, options?: GenerateOptions): AsyncGenerator<Event, void, undefined>
  /** The assistant's answer, with the model's chat template. */
  chat(messages: Message[], options?: GenerateOptions): Promise<string>
  chatStream(messages: Message[], options?: GenerateOptions): AsyncGenerator<Event, void, undefined>
  /** Token ids (with the BOS token the model adds to prompts unless `addSpecial` is false). */
  tokenize(text: string, options?: { addSpecial?: boolean }): number[]
  detokenize(ids: number[]): string
}
