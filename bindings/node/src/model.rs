//! A loaded model and its engine.

use kiln_bind::{EmbedOptions, LoadOptions, Prompt, Style};
use napi::bindgen_prelude::{AsyncTask, Either, Float32Array};
use napi::{Env, Task};
use napi_derive::napi;

use crate::options::{raw_prompt, EmbedOpts, GenOpts, LoadOpts};
use crate::stream::NativeStream;
use crate::to_js;

/// A model running in this process: a text generator, or an embedding model.
#[napi]
pub struct NativeModel {
    model: kiln_bind::Model,
    name: String,
}

/// Loading, on libuv's thread pool.
pub struct LoadTask {
    name: String,
    opts: LoadOptions,
}

impl Task for LoadTask {
    type Output = kiln_bind::Model;
    type JsValue = NativeModel;

    fn compute(&mut self) -> napi::Result<kiln_bind::Model> {
        kiln_bind::load(&self.name, &self.opts, Style::Camel).map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, model: kiln_bind::Model) -> napi::Result<NativeModel> {
        Ok(NativeModel { model, name: std::mem::take(&mut self.name) })
    }
}

/// Loads a model by name (fetching it if needed) and starts its engine.
#[napi(ts_return_type = "Promise<NativeModel>")]
pub fn load(name: String, opts: Option<LoadOpts>) -> AsyncTask<LoadTask> {
    AsyncTask::new(LoadTask { name, opts: opts.unwrap_or_default().into() })
}

impl NativeModel {
    fn engine(&self, method: &str) -> napi::Result<&kiln_bind::EngineHandle> {
        self.model.generator(method).map_err(to_js)
    }

    fn submit_prompt(&self, method: &str, prompt: Prompt, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        let opts = kiln_bind::GenOptions::from(opts.unwrap_or_default());
        let events = kiln_bind::submit(self.engine(method)?, prompt, &opts, Style::Camel).map_err(to_js)?;
        Ok(NativeStream::new(events))
    }
}

/// One ranked document: its index among the documents and its score.
#[napi(object)]
pub struct Ranked {
    pub index: u32,
    pub score: f64,
}

#[napi]
impl NativeModel {
    /// The name the model was loaded by.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// `generate`, `embed` or `rerank`: what the model does.
    #[napi(getter)]
    pub fn kind(&self) -> String {
        self.model.kind().to_string()
    }

    /// Context length in tokens (an embedding model: its longest input).
    #[napi(getter)]
    pub fn ctx_size(&self) -> u32 {
        u32::try_from(self.model.max_tokens()).unwrap_or(u32::MAX)
    }

    /// Width of an embedding model's vectors.
    #[napi(getter)]
    pub fn dimensions(&self) -> Option<u32> {
        self.model.embedder("dimensions").ok().map(|e| u32::try_from(e.info().dim()).unwrap_or(u32::MAX))
    }

    /// Submits a raw prompt (text or token ids, no chat template), templating
    /// and tokenizing on a tokio thread (`index.js` uses it for long prompts).
    #[napi]
    pub async fn submit(&self, prompt: Either<String, Vec<i64>>, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        self.submit_prompt("generate", raw_prompt(prompt)?, opts)
    }

    /// [`NativeModel::submit`] on the calling thread: for a short prompt the
    /// work is less than two thread hand-offs.
    #[napi]
    pub fn submit_now(&self, prompt: Either<String, Vec<i64>>, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        self.submit_prompt("generate", raw_prompt(prompt)?, opts)
    }

    /// Submits a conversation, rendered with the model's chat template, on a
    /// tokio thread.
    #[napi(ts_args_type = "messages: Array<Record<string, unknown>>, opts?: GenOpts")]
    pub async fn submit_chat(&self, messages: serde_json::Value, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        let prompt = kiln_bind::chat_prompt(messages).map_err(to_js)?;
        self.submit_prompt("chat", prompt, opts)
    }

    /// [`NativeModel::submit_chat`] on the calling thread.
    #[napi(ts_args_type = "messages: Array<Record<string, unknown>>, opts?: GenOpts")]
    pub fn submit_chat_now(&self, messages: serde_json::Value, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        let prompt = kiln_bind::chat_prompt(messages).map_err(to_js)?;
        self.submit_prompt("chat", prompt, opts)
    }

    /// One vector per text, computed without blocking the event loop.
    #[napi(ts_return_type = "Promise<Array<Float32Array>>")]
    pub async fn embed(&self, texts: Vec<String>, opts: Option<EmbedOpts>) -> napi::Result<Vec<Float32Array>> {
        let emb = self.model.embedder("embed").map_err(to_js)?;
        let opts = EmbedOptions::from(opts.unwrap_or_default());
        let vectors = kiln_bind::embed_async(emb, &texts, &opts).map_err(to_js)?.await.map_err(to_js)?;
        Ok(vectors.into_iter().map(Float32Array::new).collect())
    }

    /// `(index, score)` of each document by relevance to `query`, best first.
    #[napi]
    pub async fn rerank(
        &self,
        query: String,
        documents: Vec<String>,
        truncate: Option<bool>,
    ) -> napi::Result<Vec<Ranked>> {
        let emb = self.model.embedder("rerank").map_err(to_js)?;
        let ranked = kiln_bind::rerank_async(emb, &query, &documents, truncate.unwrap_or(false))
            .map_err(to_js)?
            .await
            .map_err(to_js)?;
        Ok(ranked
            .into_iter()
            .map(|(i, s)| Ranked { index: u32::try_from(i).unwrap_or(u32::MAX), score: f64::from(s) })
            .collect())
    }

    /// Token ids of `text` (with the BOS token the model adds to prompts
    /// unless `addSpecial` is false).
    #[napi]
    pub fn tokenize(&self, text: String, add_special: Option<bool>) -> napi::Result<Vec<u32>> {
        kiln_bind::tokenize(self.engine("tokenize")?, &text, add_special.unwrap_or(true)).map_err(to_js)
    }

    /// Text of token ids.
    #[napi]
    pub fn detokenize(&self, ids: Vec<i64>) -> napi::Result<String> {
        kiln_bind::detokenize(self.engine("detokenize")?, &ids).map_err(to_js)
    }

    /// The engine measured as `kiln bench --streams N` measures it (for
    /// bench.mjs): one generation of `genLen` tokens per prompt, at once,
    /// each read by a Rust thread, on libuv's thread pool.
    #[napi(js_name = "_benchEngine", ts_return_type = "Promise<Array<BenchSample>>")]
    pub fn bench_engine(&self, prompts: Vec<Vec<u32>>, gen_len: u32, seed: u32) -> napi::Result<AsyncTask<BenchTask>> {
        let engine = self.engine("_benchEngine")?.clone();
        Ok(AsyncTask::new(BenchTask { engine, prompts, gen_len: gen_len as usize, seed: seed.into() }))
    }

    /// Live engine counters (for tests): `[running, waiting, kvBlocksUsed]`.
    #[napi(js_name = "_stats")]
    pub fn stats(&self) -> napi::Result<Vec<u32>> {
        let s = self.engine("_stats")?.stats();
        Ok([s.running, s.waiting, s.kv_blocks_used].map(|n| u32::try_from(n).unwrap_or(u32::MAX)).to_vec())
    }
}

/// One generation measured by [`NativeModel::bench_engine`].
#[napi(object)]
pub struct BenchSample {
    pub ttft_ms: f64,
    pub decode_tok_s: f64,
    pub tokens: u32,
}

/// [`kiln_bind::bench_engine`] on libuv's thread pool.
pub struct BenchTask {
    engine: kiln_bind::EngineHandle,
    prompts: Vec<Vec<u32>>,
    gen_len: usize,
    seed: u64,
}

impl Task for BenchTask {
    type Output = Vec<kiln_bind::Sample>;
    type JsValue = Vec<BenchSample>;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let prompts = std::mem::take(&mut self.prompts);
        kiln_bind::bench_engine(&self.engine, prompts, self.gen_len, self.seed).map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, samples: Self::Output) -> napi::Result<Self::JsValue> {
        Ok(samples
            .into_iter()
            .map(|s| BenchSample {
                ttft_ms: s.ttft_ms,
                decode_tok_s: s.decode_tok_s,
                tokens: u32::try_from(s.tokens).unwrap_or(u32::MAX),
            })
            .collect())
    }
}
