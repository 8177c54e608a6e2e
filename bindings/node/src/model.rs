//! A loaded model and its engine.

use kiln_bind::{EngineHandle, LoadOptions, Prompt, Request, Style};
use napi::bindgen_prelude::{AsyncTask, Either};
use napi::{Env, Task};
use napi_derive::napi;

use crate::options::{raw_prompt, GenOpts, LoadOpts};
use crate::stream::NativeStream;
use crate::to_js;

/// A model running in this process.
#[napi]
pub struct NativeModel {
    engine: EngineHandle,
    name: String,
}

/// Loading, on libuv's thread pool.
pub struct LoadTask {
    name: String,
    opts: LoadOptions,
}

impl Task for LoadTask {
    type Output = EngineHandle;
    type JsValue = NativeModel;

    fn compute(&mut self) -> napi::Result<EngineHandle> {
        kiln_bind::load(&self.name, &self.opts, Style::Camel).map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, engine: EngineHandle) -> napi::Result<NativeModel> {
        Ok(NativeModel { engine, name: std::mem::take(&mut self.name) })
    }
}

/// Loads a model by name (fetching it if needed) and starts its engine.
#[napi(ts_return_type = "Promise<NativeModel>")]
pub fn load(name: String, opts: Option<LoadOpts>) -> AsyncTask<LoadTask> {
    AsyncTask::new(LoadTask { name, opts: opts.unwrap_or_default().into() })
}

impl NativeModel {
    fn submit_prompt(&self, prompt: Prompt, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        let mut params = kiln_bind::GenOptions::from(opts.unwrap_or_default()).params(Style::Camel).map_err(to_js)?;
        params.chat_turn = matches!(prompt, Prompt::Chat(_));
        let stream = self.engine.submit(Request { prompt, params }).map_err(|e| to_js(e.into()))?;
        Ok(NativeStream::new(stream))
    }
}

#[napi]
impl NativeModel {
    /// The name the model was loaded by.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// Context length in tokens.
    #[napi(getter)]
    pub fn ctx_size(&self) -> u32 {
        u32::try_from(self.engine.info().max_ctx).unwrap_or(u32::MAX)
    }

    /// Submits a raw prompt (text or token ids, no chat template).
    #[napi]
    pub async fn submit(&self, prompt: Either<String, Vec<i64>>, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        self.submit_prompt(raw_prompt(prompt)?, opts)
    }

    /// Submits a conversation, rendered with the model's chat template.
    #[napi(ts_args_type = "messages: Array<{ role: string; content: string }>, opts?: GenOpts")]
    pub async fn submit_chat(&self, messages: serde_json::Value, opts: Option<GenOpts>) -> napi::Result<NativeStream> {
        let prompt = kiln_bind::chat_prompt(messages, None).map_err(to_js)?;
        self.submit_prompt(prompt, opts)
    }

    /// Token ids of `text` (with the BOS token the model adds to prompts
    /// unless `addSpecial` is false).
    #[napi]
    pub fn tokenize(&self, text: String, add_special: Option<bool>) -> napi::Result<Vec<u32>> {
        kiln_bind::tokenize(&self.engine, &text, add_special.unwrap_or(true)).map_err(to_js)
    }

    /// Text of token ids.
    #[napi]
    pub fn detokenize(&self, ids: Vec<i64>) -> napi::Result<String> {
        kiln_bind::detokenize(&self.engine, &ids).map_err(to_js)
    }

    /// The engine measured as `kiln bench --streams N` measures it (for
    /// bench.mjs): one generation of `genLen` tokens per prompt, at once,
    /// each read by a Rust thread, on libuv's thread pool.
    #[napi(js_name = "_benchEngine", ts_return_type = "Promise<Array<BenchSample>>")]
    pub fn bench_engine(&self, prompts: Vec<Vec<u32>>, gen_len: u32, seed: u32) -> AsyncTask<BenchTask> {
        AsyncTask::new(BenchTask { engine: self.engine.clone(), prompts, gen_len: gen_len as usize, seed: seed.into() })
    }

    /// Live engine counters (for tests): `[running, waiting, kvBlocksUsed]`.
    #[napi(js_name = "_stats")]
    pub fn stats(&self) -> Vec<u32> {
        let s = self.engine.stats();
        [s.running, s.waiting, s.kv_blocks_used].map(|n| u32::try_from(n).unwrap_or(u32::MAX)).to_vec()
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
    engine: EngineHandle,
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
