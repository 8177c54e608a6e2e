//! The compiled kernels of one device (the kernels that read no weights
//! are compiled when the device opens, the products and the embedding
//! lookup of a weight format when the first matrix of that format is
//! loaded: so a driver that rejects one fails at load, not mid-step), and how a dispatch binds them: binding 0 is
//! the kernel's parameters at a dynamic offset into one uniform buffer,
//! the others storage buffers, so that one bind group serves every
//! dispatch of a kernel over the same buffers (the backend caches them).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::gpu::Gpu;
use crate::shaders::{self, WeightFormat};
use crate::Result;

/// Bytes of the parameters one kernel reads (16 words at most).
pub(crate) const PARAM_BYTES: u64 = 64;

/// How a kernel binds a storage buffer.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}
use Access::{Read as R, Write as W};

/// One kernel: its pipeline, its bind group layout and a number that
/// names it in the backend's cache of bind groups.
pub(crate) struct Kernel {
    pub(crate) name: Arc<str>,
    pub(crate) pipe: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    /// The bindings of its storage buffers, in the order a dispatch
    /// passes them.
    pub(crate) bindings: Vec<u32>,
    pub(crate) id: u32,
}

/// One compute pipeline per kernel.
pub(crate) struct Kernels {
    /// Per format (compiled by [`Kernels::load_format`]).
    formats: Vec<OnceLock<FormatKernels>>,
    pub(crate) norm: Kernel,
    pub(crate) glu: Kernel,
    pub(crate) rope_kv: Kernel,
    pub(crate) attention: Kernel,
    pub(crate) attn_combine: Kernel,
    /// Quantizes a product's input row for the integer-dot products, per
    /// input form (as they are, normed, gated).
    pub(crate) quant_x: Vec<Kernel>,
    /// Sampling: argmax candidates, then the draw ([`sample_threads`]
    /// threads a row).
    pub(crate) sample_max: Kernel,
    pub(crate) sample: Kernel,
}

/// The kernels that read weights of one format.
struct FormatKernels {
    /// One per [`shaders::PRODUCT_FORMS`] (`None`: a [`shaders::STAGED`]
    /// form the format does not have; the normed form serves).
    product: Vec<Option<Kernel>>,
    /// The tiled forms (prompts) with f16 tiles (multiplied by cooperative
    /// matrices where the device uses them), where the device uses them:
    /// per [`shaders::PRODUCT_FORMS`], `None` for the others.
    product_f16: Vec<Option<Kernel>>,
    /// The decode product by integer dot products (formats read in
    /// pieces).
    dot: Option<Kernel>,
    embed: Kernel,
}

/// Numbers the kernels of every device (bind groups are cached per device,
/// so only their distinctness matters).
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

fn kernel(gpu: &Gpu, name: &str, src: &str, storage: &[Access]) -> Kernel {
    let at: Vec<(u32, Access)> = storage.iter().enumerate().map(|(i, &a)| (i as u32 + 1, a)).collect();
    kernel_at(gpu, name, src, &at)
}

/// [`kernel`] with storage buffers at the bindings named (the others
/// unbound).
fn kernel_at(gpu: &Gpu, name: &str, src: &str, storage: &[(u32, Access)]) -> Kernel {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(src.into()) };
    // SAFETY: `runtime_checks` drops only checks these kernels do not
    // need (see there).
    let module = unsafe { gpu.device.create_shader_module_trusted(desc, runtime_checks(gpu)) };
    let entry = |binding: u32, ty: wgpu::BindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty,
        count: None,
    };
    let mut entries = vec![entry(
        0,
        wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: std::num::NonZeroU64::new(PARAM_BYTES),
        },
    )];
    for &(binding, a) in storage {
        entries.push(entry(
            binding,
            wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: matches!(a, Access::Read) },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
        ));
    }
    let layout =
        gpu.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &entries });
    let pl = gpu.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipe = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: Some(&pl),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bindings = storage.iter().map(|&(b, _)| b).collect();
    Kernel { name: name.into(), pipe, layout, bindings, id: NEXT_ID.fetch_add(1, Ordering::Relaxed) }
}

/// The runtime checks naga compiles the kernels with. Every loop of the
/// kernels ends (its bound is a constant or a step parameter, and its
/// counter steps by a nonzero constant), every integer divisor is a
/// constant or a parameter the host checks is nonzero (a KV block's
/// positions, KV heads, heads per KV head, a gated unit's width), and every
/// index into workgroup or private arrays is made of the thread's id and
/// constants, or of head dimensions the backend bounds at load
/// ([`crate::kv::MAX_HEAD_DIM`]); so naga's loop counters, division
/// guards and array-index clamps are dropped: on an H200, an 8B Q4_K_M
/// model decoded 11% faster without them and took prompts 29% faster.
/// Buffer reads and writes stay bounded: on Vulkan by the driver (the
/// robust buffer access wgpu enables, where naga already leaves buffer
/// accesses unchecked), elsewhere by naga's checks, kept.
/// `KILN_WGPU_CHECKED=1` ([`crate::WgpuOptions::checked`]) compiles with
/// every check, to tell a kernel's bug from a check's absence.
fn runtime_checks(gpu: &Gpu) -> wgpu::ShaderRuntimeChecks {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    if !gpu.checked {
        c.force_loop_bounding = false;
        c.int_div_checks = false;
        c.bounds_checks = gpu.summary.backend != "vulkan";
    }
    c
}

/// Threads of the sampling kernel's workgroup (one per logit row, which
/// walks the row several times when it draws): 1024 where the adapter
/// allows, else 256 (every adapter the backend opens allows that).
pub(crate) fn sample_threads(gpu: &Gpu) -> u32 {
    let l = &gpu.limits;
    if l.max_compute_invocations_per_workgroup >= 1024 && l.max_compute_workgroup_size_x >= 1024 {
        1024
    } else {
        256
    }
}

fn index(ty: WeightFormat) -> usize {
    WeightFormat::ALL.iter().position(|&t| t == ty).unwrap_or(0)
}

impl Kernels {
    /// Compiles every kernel on `gpu`.
    pub(crate) fn new(gpu: &Gpu) -> Result<Self> {
        let k = Self {
            formats: WeightFormat::ALL.iter().map(|_| OnceLock::new()).collect(),
            norm: kernel(gpu, "norm", shaders::NORM, &[R, R, R, W]),
            glu: kernel(gpu, "glu", shaders::GLU, &[R, W]),
            rope_kv: kernel(gpu, "rope_kv", shaders::ROPE_KV, &[W, R, R, R, R, R, W, W]),
            attention: kernel(gpu, "attention", shaders::ATTENTION, &[R, R, R, R, W, W]),
            attn_combine: kernel(gpu, "attn_combine", shaders::ATTN_COMBINE, &[R, W]),
            quant_x: (0..3)
                .map(|input| {
                    kernel_at(gpu, &format!("quant_x_{input}"), &shaders::quant_x(input), &[(1, W), (2, R), (5, R)])
                })
                .collect(),
            sample_max: kernel(gpu, "sample_max", shaders::SAMPLE_MAX, &[R, W]),
            sample: kernel(gpu, "sample", &shaders::sample(sample_threads(gpu)), &[R, R, R, W]),
        };
        gpu.check()?;
        Ok(k)
    }
    /// Compiles the products and the embedding lookup over weights of
    /// `ty` (once per device; a dozen kernels per format, so only the
    /// formats a model has are compiled).
    pub(crate) fn load_format(&self, gpu: &Gpu, ty: WeightFormat) -> Result<()> {
        self.formats[index(ty)].get_or_init(|| FormatKernels {
            product: shaders::PRODUCT_FORMS
                .iter()
                .map(|&(tile, rows, input)| {
                    let sub = gpu.summary.subgroups_used;
                    if shaders::is_staged(input) && !shaders::stages(ty, sub) {
                        return None;
                    }
                    if input == shaders::STAGED_GATED
                        && gpu.limits.max_compute_workgroup_storage_size < shaders::STAGE_GATED_BYTES
                    {
                        return None;
                    }
                    let name = format!("product{tile}x{rows}_{input}_{}", ty.name());
                    let src = shaders::product(ty, tile, rows, input, sub, shaders::TileArith::F32);
                    Some(kernel(gpu, &name, &src, &[R, R, W, R, R]))
                })
                .collect(),
            product_f16: shaders::PRODUCT_FORMS
                .iter()
                .map(|&(tile, rows, input)| {
                    // F32 weights keep f32 tiles: f16 would round the
                    // weights themselves.
                    if !gpu.summary.f16_used || tile < 64 || ty == WeightFormat::F32 {
                        return None;
                    }
                    let (name, arith) = match (gpu.summary.coop_matrix, gpu.f16_fold) {
                        (Some(frag), _) if gpu.summary.coop_used => (
                            format!("product{tile}x{rows}_{input}_{}_coop{frag}", ty.name()),
                            shaders::TileArith::Coop { frag, round: gpu.coop_round, k_inner: gpu.coop_k_inner },
                        ),
                        (_, fold) => (
                            format!("product{tile}x{rows}_{input}_{}_f16", ty.name()),
                            fold.map_or(shaders::TileArith::F16_DEFAULT, |fold_rounds| shaders::TileArith::F16 {
                                fold_rounds,
                            }),
                        ),
                    };
                    let src = shaders::product(ty, tile, rows, input, false, arith);
                    Some(kernel(gpu, &name, &src, &[R, R, W, R, R]))
                })
                .collect(),
            dot: ty.pieces().then(|| {
                kernel(gpu, &format!("product_dot_{}", ty.name()), &shaders::product_dot(ty), &[R, R, W, R, R])
            }),
            embed: kernel(gpu, &format!("embed_{}", ty.name()), &shaders::embed(ty), &[R, R, W]),
        });
        gpu.check()
    }
    /// The product over weights of `ty` taking `tile` (input rows, output
    /// rows) a workgroup ([`shaders::product_tile`]), read as `input` says;
    /// a tiled form in f16 tiles where `f16` and the device has them; the
    /// normed form for a [`shaders::STAGED`] one the format lacks; `None`
    /// before [`Kernels::load_format`].
    pub(crate) fn product(&self, ty: WeightFormat, tile: (u32, u32), input: u32, f16: bool) -> Option<&Kernel> {
        let i = shaders::product_form(tile, input)?;
        let k = self.formats[index(ty)].get()?;
        match (k.product_f16.get(i), k.product.get(i)?) {
            (Some(Some(h)), _) if f16 => Some(h),
            (_, Some(p)) => Some(p),
            (_, None) if input == shaders::STAGED => self.product(ty, tile, 1, f16),
            (_, None) if input == shaders::STAGED_GATED => self.product(ty, tile, 2, f16),
            (_, None) => None,
        }
    }
    /// The decode product over weights of `ty` by integer dot products;
    /// `None` for formats without one or before [`Kernels::load_format`].
    pub(crate) fn dot(&self, ty: WeightFormat) -> Option<&Kernel> {
        self.formats[index(ty)].get()?.dot.as_ref()
    }
    /// The embedding lookup over weights of `ty`; `None` before
    /// [`Kernels::load_format`].
    pub(crate) fn embed(&self, ty: WeightFormat) -> Option<&Kernel> {
        Some(&self.formats[index(ty)].get()?.embed)
    }
}
