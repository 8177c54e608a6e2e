//! Running the case list on a backend, so that a backend's tests and
//! commands hand over only how to make the backend:
//! [`device_factory`] turns a device's constructor into a [`Factory`];
//! [`check`] runs one case as a test would; [`run_command`] runs the list
//! as the GPU machines' commands do (`cuda-tiny-cases`,
//! `wgpu-tiny-cases`); [`tiny_case_tests!`](crate::tiny_case_tests)
//! declares one `#[test]` per case.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kiln_backend::{Backend, Feature, ModelHints};

use super::{all, Case, Factory, Setup, BLOCKS};
use crate::{KvType, RunOptions, Runner};

/// A factory for a device backend from its constructor alone: `open` gets
/// the model's hints and the factory's `exact` flag (read the weights
/// exactly, where the backend would otherwise take a faster, rounder
/// path); the runner gets [`Setup::GPU`]'s block size, [`BLOCKS`] blocks,
/// no host tier and the exact KV path.
pub fn device_factory<'a, B: Backend + 'a>(
    open: impl Fn(&ModelHints, bool) -> Result<B, String> + 'a,
) -> Box<Factory<'a, B>> {
    device_factory_with(open, KvType::F16, KvType::F16)
}

/// [`device_factory`] with K stored as `type_k` and V as `type_v`.
pub fn device_factory_with<'a, B: Backend + 'a>(
    open: impl Fn(&ModelHints, bool) -> Result<B, String> + 'a,
    type_k: KvType,
    type_v: KvType,
) -> Box<Factory<'a, B>> {
    Box::new(move |path: &Path, exact: bool| {
        let opened = crate::open(path).map_err(|e| e.to_string())?;
        let hints = opened.device_hints().map_err(|e| e.to_string())?;
        let be = open(&hints, exact)?;
        let bs = Setup::GPU.block_size;
        let run = RunOptions {
            max_ctx: BLOCKS * bs,
            block_size: bs,
            kv_blocks: Some(BLOCKS),
            tier_slots: 0,
            fast_kv: false,
            type_k,
            type_v,
            window_blocks: None,
        };
        Runner::load(be, &opened, &run).map_err(|e| e.to_string())
    })
}

/// A folder for a case's model files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("kiln-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first feature `case` needs that the backend lacks.
fn missing<B: Backend>(case: &Case<B>, supports: fn(Feature) -> bool) -> Option<Feature> {
    case.needs.iter().copied().find(|&f| !supports(f))
}

/// Runs the case `name` as a test: where the backend has every feature
/// the case needs (`supports`) it must pass; otherwise it must fail (the
/// model refuses to load, or a step is refused), never pass by accident.
pub fn check<B: Backend>(
    name: &str,
    make: &Factory<'_, B>,
    setup: Setup,
    supports: fn(Feature) -> bool,
) -> Result<(), String> {
    let case = all::<B>().into_iter().find(|c| c.name == name).ok_or_else(|| format!("no case named {name}"))?;
    let dir = Scratch::new(&format!("tiny-case-{name}"))?;
    let result = (case.run)(make, &dir.0, setup);
    match (missing(&case, supports), result) {
        (None, Ok(())) | (Some(_), Err(_)) => Ok(()),
        (None, Err(e)) => Err(format!("{name}: {e}")),
        (Some(f), Ok(())) => Err(format!("{name} passed without {f:?}")),
    }
}

/// Runs the cases named in `only` (every case when it is empty) on a
/// device, as a command: prints `test NAME ... ok`, `... FAILED: why`, or
/// `... skipped: the DEVICE backend has no FEATURE yet`, then the counts.
/// Fails when a case fails or `only` names no case.
pub fn run_command<B: Backend>(
    device: &str,
    make: &Factory<'_, B>,
    supports: fn(Feature) -> bool,
    only: &[String],
) -> ExitCode {
    let cases = all::<B>();
    if let Some(bad) = only.iter().find(|o| !cases.iter().any(|c| c.name == o.as_str())) {
        let names: Vec<&str> = cases.iter().map(|c| c.name).collect();
        eprintln!("error: no case named {bad} (the cases: {})", names.join(", "));
        return ExitCode::FAILURE;
    }
    let dir = match Scratch::new(&format!("{}-tiny-cases", device.to_lowercase())) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for case in cases.iter().filter(|c| only.is_empty() || only.iter().any(|o| o == c.name)) {
        if let Some(f) = missing(case, supports) {
            println!("test {} ... skipped: the {device} backend has no {f:?} yet", case.name);
            continue;
        }
        match (case.run)(make, &dir.0, Setup::GPU) {
            Ok(()) => {
                passed += 1;
                println!("test {} ... ok", case.name);
            }
            Err(e) => {
                failed += 1;
                println!("test {} ... FAILED: {e}", case.name);
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The names of every case, in order.
pub fn names() -> Vec<&'static str> {
    all::<kiln_kernels::CpuBackend>().iter().map(|c| c.name).collect()
}

/// Declares one `#[test]` per case of the list, named as the case, each
/// calling `$run("name")`, and `every_case_has_a_test`, which fails when
/// the list has a case this macro does not name (add it here).
///
/// ```ignore
/// fn run(name: &str) {
///     let make = cases::device_factory(my_backend);
///     cases::check(name, &*make, Setup::GPU, my_supports).unwrap_or_else(|e| panic!("{e}"));
/// }
/// kiln_models::tiny_case_tests!(run);
/// ```
#[macro_export]
macro_rules! tiny_case_tests {
    ($run:path) => {
        $crate::tiny_case_tests!(@each $run;
            llama_f32_matches_reference,
            qwen2_and_qwen3_match_reference,
            quantized_formats_match_reference,
            k_quant_formats_match_reference,
            chunked_prefill_and_decode_equal_one_pass,
            long_prefix_chunks_equal_decodes,
            batch_of_sequences_equals_each_alone,
            bad_batches_are_errors,
            gemma3_matches_reference,
            gemma3_sliding_window_matches_reference,
            moe_families_match_reference,
            moe_chunked_and_batched_equal_one_pass,
            gpt_oss_matches_reference,
            lora_matches_reference,
            lora_gguf_equals_peft,
            lora_mixed_batch_equals_each_alone,
            lora_zero_b_equals_base,
        );
    };
    (@each $run:path; $($name:ident,)*) => {
        $(
            #[test]
            fn $name() {
                $run(stringify!($name));
            }
        )*

        /// Every case of the shared list has a test here.
        #[test]
        fn every_case_has_a_test() {
            let listed = [$(stringify!($name)),*];
            for name in $crate::testing::cases::names() {
                assert!(listed.contains(&name), "the case {name} has no test: add it to tiny_case_tests!");
            }
        }
    };
}
