//! # kiln-wgpu
//!
//! kiln's portable GPU as a [`kiln_backend::Backend`] ([`WgpuBackend`]):
//! one set of WGSL compute kernels ([`shaders`]) that wgpu runs on Vulkan,
//! Metal, DX12 or GL. Weights stay in the GGUF file's own bytes on the
//! device for F32, F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K, read in
//! place by the products; other formats are dequantized to F16 at load.
//! Activations are f32; the paged KV cache is f16, laid out
//! `[block][kv head][slot][hd]` per layer, with the block ids the engine's
//! `KvManager` hands out, and attention reads its blocks in place.
//!
//! A step is recorded into command buffers submitted in parts as it is
//! recorded; rows the engine gives a draw are sampled on the device, so
//! only their token ids come back (the other rows' logits come back for
//! the engine to sample).
//!
//! This crate knows no tensor names and no model family: a model file
//! drives it through the backend interface. Without the `wgpu` feature it
//! builds in seconds, [`WgpuBackend::open`] returns an error, and the
//! kernel sources are still listed ([`shaders::modules`]). See
//! docs/wgpu.md.
#![warn(missing_docs, unreachable_pub)]

pub mod shaders;

#[cfg(not(feature = "wgpu"))]
mod absent;
#[cfg(feature = "wgpu")]
mod backend;
#[cfg(feature = "wgpu")]
mod bind_cache;
#[cfg(feature = "wgpu")]
mod gpu;
#[cfg(feature = "wgpu")]
mod kernels;
#[cfg(feature = "wgpu")]
mod kv;
#[cfg(feature = "wgpu")]
mod matrix;
#[cfg(feature = "wgpu")]
mod profile;

#[cfg(not(feature = "wgpu"))]
pub use absent::{NoWgpu, WgpuBackend, WgpuKv};
#[cfg(feature = "wgpu")]
pub use backend::WgpuBackend;
#[cfg(feature = "wgpu")]
pub use kv::WgpuKv;

use kiln_backend::BackendError;

/// What a build without the `wgpu` feature says when asked for the backend.
const NOT_BUILT: &str =
    "this kiln was built without the wgpu backend: rebuild with `cargo build --release -p kiln --features wgpu` (docs/wgpu.md)";

/// Errors of the wgpu backend (reported as [`BackendError`]s).
#[derive(Debug, thiserror::Error)]
pub enum WgpuError {
    /// This binary has no wgpu backend.
    #[error("{}", NOT_BUILT)]
    NotBuilt,
    /// A bad setting (`KILN_WGPU_BACKEND`, an option).
    #[error("{0}")]
    Options(String),
    /// The device or driver failed (no adapter, a validation error).
    #[error("wgpu: {0}")]
    Device(String),
    /// The model uses something this backend does not run yet.
    #[error("not supported on wgpu: {0}")]
    Unsupported(String),
    /// A buffer does not fit the adapter's limits or memory.
    #[error("not enough GPU memory: {0}")]
    OutOfMemory(String),
    /// A weight or a batch was malformed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl From<WgpuError> for BackendError {
    fn from(e: WgpuError) -> Self {
        match e {
            WgpuError::Backend(b) => b,
            WgpuError::Unsupported(what) => BackendError::Unsupported { device: "wgpu", what },
            WgpuError::OutOfMemory(what) => BackendError::OutOfMemory { device: "wgpu", what },
            other => BackendError::Device { device: "wgpu", what: other.to_string() },
        }
    }
}

/// Result of the wgpu backend.
pub type Result<T> = std::result::Result<T, WgpuError>;

/// How to open a device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WgpuOptions {
    /// Adapter number (`wgpu:N`), in the order `kiln list-devices` shows.
    pub ordinal: usize,
    /// The API to use (`vulkan`, `metal`, `dx12`, `gl`); `None`: any
    /// (`KILN_WGPU_BACKEND` sets it, see [`WgpuOptions::from_env`]).
    pub backend: Option<String>,
    /// Most tokens one forward pass may hold (the scheduler's step budget).
    pub max_batch_tokens: usize,
    /// Bind at most this many bytes per storage buffer, below the
    /// adapter's limit (`None`: the adapter's, up to 1 GiB). Tests use it
    /// to split small weights across buffers as large models are.
    pub max_binding_bytes: Option<u64>,
    /// Time every kernel on the GPU and print the totals when the backend
    /// is dropped (`KILN_WGPU_PROFILE=1`; steps run slower meanwhile).
    pub profile: bool,
    /// Dispatches in a step's first submitted part (later parts double;
    /// `Some(0)`: each step submitted whole; `None`: the backend's
    /// default). `KILN_WGPU_FIRST_SUBMIT` sets it.
    pub first_submit: Option<u64>,
    /// Most dispatches in one submitted part (parts double up to it;
    /// `None`: the backend's default). `KILN_WGPU_SUBMIT_MAX` sets it.
    pub submit_max: Option<u64>,
    /// Decode products over K-quant matrices of at least this many bytes
    /// quantize their input row and multiply by integer dot products
    /// (`Some(0)`: every one; `Some(u64::MAX)`: none; `None`: the
    /// backend's default). `KILN_WGPU_DOT_FROM` sets it (`off`: none).
    pub dot_from: Option<u64>,
    /// A decode step's gated unit is written by its own kernel before a
    /// down product of at least this many bytes that does not take the
    /// integer-dot path, instead of inside the product (`None`: the
    /// backend's default). `KILN_WGPU_GLU_APART_FROM` sets it.
    pub glu_apart_from: Option<u64>,
    /// Steps of at least this many rows take products in tiles of 128
    /// input × 128 output rows, smaller steps of 48 rows or more tiles of
    /// 64 (`None`: the backend's default; `Some(usize::MAX)`: never).
    /// `KILN_WGPU_TILE128_FROM` sets it (`off`: never).
    pub tile128_from: Option<usize>,
    /// ... when their grid has at least this many workgroups (`None`: the
    /// backend's default). `KILN_WGPU_TILE128_GROUPS` sets it.
    pub tile128_groups: Option<usize>,
    /// Steps of at least this many rows take the tiled prompt products
    /// (`None`: [`shaders::TILED_FROM`], or per format
    /// [`shaders::coop_tiled_from`] where they multiply by cooperative
    /// matrices; at least 9). `KILN_WGPU_TILED_FROM` sets it.
    pub tiled_from: Option<usize>,
    /// Compile the kernels with every runtime check naga offers (loop
    /// counters, division guards, index clamps: slower; see
    /// `kernels::runtime_checks` for what is dropped otherwise).
    /// `KILN_WGPU_CHECKED=1` sets it.
    pub checked: bool,
    /// Sample on the host: the logits of every row are read back and the
    /// engine samples them (`false`: rows the engine gives a draw are
    /// sampled on the device, only their token ids read back).
    /// `KILN_WGPU_HOST_SAMPLING=1` sets it.
    pub host_sampling: bool,
    /// Sum the decode products' rows by subgroup operations where the
    /// adapter's subgroups are exactly 32 invocations (off by default: on
    /// an H200 the SmolLM2 shape decoded 8–9% faster so, the 8B and 0.5B
    /// F16 shapes 1–2% slower). `KILN_WGPU_SUBGROUPS=1` turns them on.
    pub subgroups: bool,
    /// Multiply the prompt products' tiles in f16 where the adapter offers
    /// shader-f16 (their sums folded into f32 every few dozen columns);
    /// `false`: f32 everywhere. `KILN_WGPU_F16=0` turns it off.
    pub f16: bool,
    /// Rounds of columns between the f16 tiles' folds into f32 sums
    /// (`None`: every round). `KILN_WGPU_F16_FOLD` sets it.
    pub f16_fold: Option<u32>,
    /// Decode products that norm their input row (QKV, gate/up) over
    /// formats read in units (F16, F32, Q8_0, Q4_0, Q4_1) stage the normed
    /// row in workgroup memory first (rows of up to
    /// [`shaders::STAGE_COLS`] values). `KILN_WGPU_STAGE_X=0` turns it off.
    pub stage_x: bool,
    /// Decode down products over formats read in units take their gated
    /// unit staged in workgroup memory (units of up to
    /// [`shaders::STAGE_GATED_COLS`], where the adapter's workgroup memory
    /// holds it) instead of having it written apart or read from the
    /// buffers. `KILN_WGPU_STAGE_GLU=0` turns it off.
    pub stage_glu: bool,
    /// A decode step's attention output, computed in key splits, is merged
    /// by the output product that reads it (formats read in units; its
    /// `STAGED_COMBINED` form) instead of by an `attn_combine` dispatch
    /// before it. `KILN_WGPU_FUSE_COMBINE=0` keeps the dispatch.
    pub fuse_combine: bool,
    /// Multiply the prompt products' f16 tiles by cooperative matrices
    /// where the adapter offers f16 × f16 → f32 ones of 16 × 16 or 8 × 8
    /// (`None`: on Vulkan adapters whose subgroups are exactly 32
    /// invocations, verified on NVIDIA; `Some(true)` wherever offered,
    /// Metal included, never executed here; `Some(false)`: never).
    /// `KILN_WGPU_COOP=0|1` sets it.
    pub coop: Option<bool>,
    /// Columns of a round of the cooperative tiles: 32 or 64 (`None`: the
    /// backend's default, [`shaders::COOP_ROUND`]; 64 only where the
    /// adapter's workgroup memory holds it). `KILN_WGPU_COOP_ROUND` sets it.
    pub coop_round: Option<u32>,
    /// The cooperative tiles hold each row's columns together (else each
    /// column's rows). `KILN_WGPU_COOP_K_INNER=0` turns it off.
    pub coop_k_inner: bool,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        Self {
            ordinal: 0,
            backend: None,
            max_batch_tokens: 256,
            max_binding_bytes: None,
            profile: false,
            first_submit: None,
            submit_max: None,
            dot_from: None,
            glu_apart_from: None,
            tile128_from: None,
            tile128_groups: None,
            tiled_from: None,
            checked: false,
            host_sampling: false,
            subgroups: false,
            f16: true,
            f16_fold: None,
            stage_x: true,
            stage_glu: true,
            fuse_combine: true,
            coop: None,
            coop_round: None,
            coop_k_inner: true,
        }
    }
}

impl WgpuOptions {
    /// The defaults with the API from `KILN_WGPU_BACKEND` (when set),
    /// profiling from `KILN_WGPU_PROFILE` (set and not `0`) and the first
    /// submitted part of a step from `KILN_WGPU_FIRST_SUBMIT`, the
    /// integer-dot products' threshold from `KILN_WGPU_DOT_FROM`, the gated
    /// unit's from `KILN_WGPU_GLU_APART_FROM`, the 128-row tiles' from
    /// `KILN_WGPU_TILE128_FROM`, the
    /// kernels' runtime checks from `KILN_WGPU_CHECKED`, host sampling
    /// from `KILN_WGPU_HOST_SAMPLING`, subgroups from `KILN_WGPU_SUBGROUPS`,
    /// f16 tiles from `KILN_WGPU_F16` and `KILN_WGPU_F16_FOLD`, cooperative
    /// matrices from `KILN_WGPU_COOP` and `KILN_WGPU_COOP_ROUND`.
    pub fn from_env() -> Self {
        let set = |name: &str| std::env::var(name).ok().filter(|s| !s.trim().is_empty());
        // A set variable that is not `what` is reported and left to the default.
        let number = |name: &str, what: &str| {
            let v = set(name)?;
            let n = v.trim().parse().ok();
            if n.is_none() {
                eprintln!("{name}: '{v}' is not {what}; using the default");
            }
            n
        };
        Self {
            backend: set("KILN_WGPU_BACKEND"),
            profile: set("KILN_WGPU_PROFILE").is_some_and(|v| v.trim() != "0"),
            checked: set("KILN_WGPU_CHECKED").is_some_and(|v| v.trim() != "0"),
            host_sampling: set("KILN_WGPU_HOST_SAMPLING").is_some_and(|v| v.trim() != "0"),
            subgroups: set("KILN_WGPU_SUBGROUPS").is_some_and(|v| v.trim() != "0"),
            f16: set("KILN_WGPU_F16").is_none_or(|v| v.trim() != "0"),
            stage_x: set("KILN_WGPU_STAGE_X").is_none_or(|v| v.trim() != "0"),
            stage_glu: set("KILN_WGPU_STAGE_GLU").is_none_or(|v| v.trim() != "0"),
            fuse_combine: set("KILN_WGPU_FUSE_COMBINE").is_none_or(|v| v.trim() != "0"),
            coop: set("KILN_WGPU_COOP").map(|v| v.trim() != "0"),
            coop_k_inner: set("KILN_WGPU_COOP_K_INNER").is_none_or(|v| v.trim() != "0"),
            coop_round: number("KILN_WGPU_COOP_ROUND", "32 or 64").map(|n: u64| if n >= 64 { 64 } else { 32 }),
            f16_fold: number("KILN_WGPU_F16_FOLD", "a number of rounds")
                .map(|n: u64| u32::try_from(n.clamp(1, 64)).unwrap_or(1)),
            first_submit: number("KILN_WGPU_FIRST_SUBMIT", "a number of dispatches"),
            submit_max: number("KILN_WGPU_SUBMIT_MAX", "a number of dispatches").map(|n: u64| n.max(1)),
            dot_from: match set("KILN_WGPU_DOT_FROM") {
                Some(v) if v.trim() == "off" => Some(u64::MAX),
                _ => number("KILN_WGPU_DOT_FROM", "a number of bytes or 'off'"),
            },
            glu_apart_from: number("KILN_WGPU_GLU_APART_FROM", "a number of bytes"),
            tile128_from: match set("KILN_WGPU_TILE128_FROM") {
                Some(v) if v.trim() == "off" => Some(usize::MAX),
                _ => number("KILN_WGPU_TILE128_FROM", "a number of rows or 'off'")
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            },
            tile128_groups: number("KILN_WGPU_TILE128_GROUPS", "a number of workgroups")
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            tiled_from: number("KILN_WGPU_TILED_FROM", "a number of rows")
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            ..Self::default()
        }
    }
}

/// What an adapter is and offers (`kiln list-devices`, the bench header).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AdapterSummary {
    /// Its number (`wgpu:N`).
    pub index: usize,
    /// The adapter's name.
    pub name: String,
    /// The API (vulkan, metal, dx12, gl).
    pub backend: String,
    /// Discrete, integrated, CPU, ...
    pub device_type: String,
    /// The driver and its version.
    pub driver: String,
    /// Largest storage buffer binding this backend uses (bytes): a
    /// weight larger than this is split across buffers by rows.
    pub max_binding_bytes: u64,
    /// Largest buffer (bytes).
    pub max_buffer_bytes: u64,
    /// Most invocations of one workgroup.
    pub max_workgroup_invocations: u32,
    /// The adapter offers f16 arithmetic in shaders.
    pub shader_f16: bool,
    /// The prompt products multiply f16 tiles here: offered and not
    /// turned off ([`WgpuOptions::f16`]).
    pub f16_used: bool,
    /// The adapter offers subgroup operations.
    pub subgroups: bool,
    /// Its smallest and largest subgroup (invocations).
    pub subgroup_sizes: (u32, u32),
    /// The kernels use subgroup operations here: offered, every subgroup
    /// exactly 32 invocations, and asked for ([`WgpuOptions::subgroups`]).
    pub subgroups_used: bool,
    /// The fragment (rows = columns) of the f16 × f16 → f32 cooperative
    /// matrices the adapter offers (16 or 8, the largest; `None`: none).
    pub coop_matrix: Option<u32>,
    /// The prompt products multiply by cooperative matrices here
    /// ([`WgpuOptions::coop`]).
    pub coop_used: bool,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let f16 = match (self.shader_f16, self.f16_used) {
            (false, _) => "no",
            (true, true) => "used (prompt product tiles)",
            (true, false) => "offered, unused (KILN_WGPU_F16=0)",
        };
        let arith = match (self.f16_used, self.coop_used) {
            (true, true) => "f16 prompt tiles by cooperative matrices into f32 sums, f32 elsewhere",
            (true, false) => "f16 prompt tiles, f32 elsewhere",
            _ => "f32 arithmetic",
        };
        let coop = match (self.coop_matrix, self.coop_used) {
            (None, _) => "no".to_string(),
            (Some(f), true) => format!("{f}x{f} f16->f32, used (prompt products)"),
            (Some(f), false) => format!("{f}x{f} f16->f32, unused (KILN_WGPU_COOP=1 uses them)"),
        };
        let (lo, hi) = self.subgroup_sizes;
        let sizes = if lo == hi { format!("{lo}") } else { format!("{lo}-{hi}") };
        let sub = match (self.subgroups, self.subgroups_used) {
            (false, _) => "no".to_string(),
            (true, true) => format!("of {sizes}, used (decode row sums)"),
            (true, false) if sizes == "32" => format!("of {sizes}, unused (KILN_WGPU_SUBGROUPS=1 uses them)"),
            (true, false) => format!("of {sizes}, unused (the kernels use subgroups of exactly 32)"),
        };
        write!(
            f,
            "wgpu:{} {} ({}, {}, driver {}): max binding {} MiB, max buffer {} MiB, {} invocations/workgroup, \
             shader-f16 {}, subgroups {}, cooperative matrices {}; kernels use {}, f16 storage",
            self.index,
            self.name,
            self.backend,
            self.device_type,
            if self.driver.is_empty() { "?" } else { &self.driver },
            self.max_binding_bytes >> 20,
            self.max_buffer_bytes >> 20,
            self.max_workgroup_invocations,
            f16,
            sub,
            coop,
            arith
        )
    }
}

/// The compute-capable adapters of the APIs `backend` allows (`None`:
/// every API this build has), in the order `wgpu:N` counts them.
pub fn list_adapters(backend: Option<&str>) -> Result<Vec<AdapterSummary>> {
    #[cfg(feature = "wgpu")]
    return gpu::list(backend);
    #[cfg(not(feature = "wgpu"))]
    {
        let _ = backend;
        Err(WgpuError::NotBuilt)
    }
}

/// Whether the backend implements `f` (the same on every adapter).
pub fn supports_feature(f: kiln_backend::Feature) -> bool {
    use kiln_backend::Feature;
    match f {
        Feature::EmbedScale | Feature::PostNorm | Feature::GeluTanh | Feature::SlidingWindow => true,
        Feature::Encoder
        | Feature::Moe
        | Feature::Lora
        | Feature::KvShift
        | Feature::AttentionSinks
        | Feature::SwigluOai
        | Feature::ExpertBias => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_backend::Feature;

    /// What the backend runs is declared, so models without it refuse to
    /// load rather than misbehave.
    #[test]
    fn unsupported_features_are_declared() {
        assert!(supports_feature(Feature::GeluTanh) && supports_feature(Feature::PostNorm));
        assert!(supports_feature(Feature::SlidingWindow));
        for f in [Feature::Moe, Feature::Lora, Feature::Encoder, Feature::KvShift, Feature::AttentionSinks] {
            assert!(!supports_feature(f), "{f:?}");
        }
    }

    /// A build without the feature says how to get one.
    #[cfg(not(feature = "wgpu"))]
    #[test]
    fn a_build_without_wgpu_says_how_to_get_it() {
        // What `WgpuBackend::open` returns (kiln_backend::absent tests that).
        assert_eq!(WgpuBackend::not_built().to_string(), format!("wgpu: {NOT_BUILT}"));
        assert!(NOT_BUILT.contains("`cargo build --release -p kiln --features wgpu`"));
        assert_eq!(list_adapters(None).err().map(|e| e.to_string()).as_deref(), Some(NOT_BUILT));
    }

    /// `KILN_WGPU_BACKEND` names one API; a typo is an error naming the choices.
    #[cfg(feature = "wgpu")]
    #[test]
    fn backend_names_parse() {
        assert_eq!(gpu::backends(Some("Vulkan")).unwrap(), wgpu::Backends::VULKAN);
        assert_eq!(gpu::backends(Some("metal")).unwrap(), wgpu::Backends::METAL);
        assert_eq!(gpu::backends(Some("dx12")).unwrap(), wgpu::Backends::DX12);
        assert_eq!(gpu::backends(Some("gl")).unwrap(), wgpu::Backends::GL);
        assert_eq!(gpu::backends(None).unwrap(), wgpu::Backends::PRIMARY);
        let e = gpu::backends(Some("cuda")).unwrap_err().to_string();
        assert!(e.contains("vulkan, metal, dx12 or gl"), "{e}");
    }
}
