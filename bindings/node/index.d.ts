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
  /**
   * `{ type: 'json_object' }`, `{ type: 'json_schema', json_schema: { schema } }`,
   * `{ type: 'grammar', grammar }` (Lark) or `{ type: 'text' }`: enforced token by token.
   */
  responseFormat?: Record<string, unknown>
  /**
   * Completions only: texts placed before the prompt, each a segment whose KV is computed once
   * and reused wherever it appears (docs/segment-cache.md). In a chat, mark content parts
   * `{ type: 'text', text, cache: 'segment' }` instead.
   */
  segments?: string[]
  /** Aborting cancels the request and frees its KV cache; the promise or iterator rejects with `signal.reason`. */
  signal?: AbortSignal
}

/** A function tool (OpenAI's shape). */
export interface Tool {
  type: 'function'
  function: { name: string; description?: string; parameters?: Record<string, unknown> }
}

/** How to answer a conversation. */
export interface ChatOptions extends GenerateOptions {
  /** Tools the model may call (`chatMessage` and `chatStream`; `chat` returns text only and refuses them). */
  tools?: Tool[]
  /** `auto` (the default with tools), `none`, `required`, or `{ type: 'function', function: { name } }`. */
  toolChoice?: 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } }
  /** Several calls in one answer when a call is required (default true). */
  parallelToolCalls?: boolean
  /** For chat templates that read it. */
  reasoningEffort?: 'minimal' | 'low' | 'medium' | 'high'
  /** More chat template variables, e.g. `{ enable_thinking: false }`. */
  chatTemplateKwargs?: Record<string, unknown>
}

/** A chat message (OpenAI's shape). */
export interface Message {
  role: string
  /** Text, or text parts; a part with `cache: 'segment'` is a segment (docs/segment-cache.md). */
  content: string | null | Array<{ type: 'text'; text: string; cache?: 'segment' }>
  tool_calls?: Array<{ id?: string; type?: 'function'; function: { name: string; arguments: string | Record<string, unknown> } }>
  tool_call_id?: string
  name?: string
  reasoning_content?: string
}

/** A call the model made. */
export interface ToolCall {
  /** For the `tool` message that answers it (`tool_call_id`). */
  id: string
  name: string
  /** The arguments object as compact JSON text (`JSON.parse(call.arguments)`). */
  arguments: string
}

/** A whole chat answer (`chatMessage`). */
export declare class Reply {
  readonly content: string
  /** The reasoning of a model that reasons, else `null`. */
  readonly reasoning: string | null
  readonly toolCalls: ToolCall[]
  /** `stop`, `length`, `cancelled` or `tool_calls`. */
  readonly finishReason: string
  readonly promptTokens: number
  readonly completionTokens: number
  /** The answer as an assistant message to append to the conversation. */
  toMessage(): Message
}

/** How to embed. */
export interface EmbedOptions {
  /** Keep the first N values of each vector (renormalized when the model's vectors are unit length). */
  dimensions?: number
  /** Cut inputs longer than the model's limit (default true) instead of failing. */
  truncate?: boolean
  /** Aborting rejects the promise with `signal.reason`. */
  signal?: AbortSignal
}

/** A generated token (`eos` false), or the last event of a stream (`eos` true, no `id`). */
export interface Event {
  id?: number
  text: string
  /** With `logprobs: true`. */
  logprob?: number
  eos: boolean
  /** On the last event: `stop`, `length`, `cancelled` or `tool_calls`. */
  finishReason?: string
  /** Reasoning text this event makes visible (a chat answer of a model that reasons). */
  reasoning?: string
  /** Tool calls this event completes (a chat stream with `tools`). */
  toolCalls?: ToolCall[]
}

/** A raw prompt: text, or token ids. */
export type Prompt = string | number[]

export declare class Model {
  private constructor()
  /** Loads `name` (`smollm2`, `all-minilm`, a `.gguf` file, a Hugging Face directory or `hf:org/repo`, fetched into the cache if needed). */
  static load(name?: string, options?: LoadOptions): Promise<Model>
  readonly name: string
  /** What the model does; the other methods reject with a TypeError. */
  readonly kind: 'generate' | 'embed' | 'rerank'
  /** Context length in tokens (an embedding model: its longest input). */
  readonly ctxSize: number
  /** Width of an embedding model's vectors (`null` for a text generation model). */
  readonly dimensions: number | null
  /** The completion of a raw prompt (no chat template). */
  generate(prompt: Prompt, options?: GenerateOptions): Promise<string>
  /** Its events; leaving the loop early cancels the request and frees its KV cache. */
  stream(prompt: Prompt, options?: GenerateOptions): AsyncGenerator<Event, void, undefined>
  /** The assistant's answer, with the model's chat template: its content (reasoning left out). */
  chat(messages: Message[], options?: ChatOptions): Promise<string>
  /** The assistant's answer with its reasoning and tool calls. */
  chatMessage(messages: Message[], options?: ChatOptions): Promise<Reply>
  chatStream(messages: Message[], options?: ChatOptions): AsyncGenerator<Event, void, undefined>
  /** One vector for a string, one per string for an array (an embedding model). */
  embed(texts: string, options?: EmbedOptions): Promise<Float32Array>
  embed(texts: string[], options?: EmbedOptions): Promise<Float32Array[]>
  /** Each document's relevance to `query`, best first (a reranker). */
  rerank(
    query: string,
    documents: string[],
    options?: { truncate?: boolean; signal?: AbortSignal },
  ): Promise<Array<{ index: number; score: number }>>
  /** Token ids (with the BOS token the model adds to prompts unless `addSpecial` is false). */
  tokenize(text: string, options?: { addSpecial?: boolean }): number[]
  detokenize(ids: number[]): string
}
