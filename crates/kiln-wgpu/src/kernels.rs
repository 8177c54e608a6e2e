//! The compiled kernels of one device (every module of [`crate::shaders`]
//! is compiled when the device opens, so a driver that rejects one fails
//! at open, not mid-step), and how a dispatch binds them: binding 0 is
//! the kernel's parameters at a dynamic offset into one uniform buffer,
//! the others storage buffers, so that one bind group serves every
//! dispatch of a kernel over the same buffers (the backend caches them).

use std::sync::Arc;

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
    pub(crate) id: u32,
}

/// One compute pipeline per kernel.
pub(crate) struct Kernels {
    /// Per format, one per [`shaders::PRODUCT_TILES`].
    product: Vec<[Kernel; 2]>,
    embed: Vec<Kernel>,
    pub(crate) norm: Kernel,
    pub(crate) glu: Kernel,
    pub(crate) rope_kv: Kernel,
    pub(crate) attention: Kernel,
    pub(crate) attn_combine: Kernel,
}

fn kernel(gpu: &Gpu, id: &mut u32, name: &str, src: &str, storage: &[Access]) -> Kernel {
    let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
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
    for (i, a) in storage.iter().enumerate() {
        entries.push(entry(
            i as u32 + 1,
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
    *id += 1;
    Kernel { name: name.into(), pipe, layout, id: *id }
}

fn index(ty: WeightFormat) -> usize {
    WeightFormat::ALL.iter().position(|&t| t == ty).unwrap_or(0)
}

impl Kernels {
    /// Compiles every kernel on `gpu`.
    pub(crate) fn new(gpu: &Gpu) -> Result<Self> {
        let mut id = 0;
        let mut product = Vec::new();
        let mut embed = Vec::new();
        for ty in WeightFormat::ALL {
            product.push(shaders::PRODUCT_TILES.map(|tile| {
                let name = format!("product{tile}_{}", ty.name());
                kernel(gpu, &mut id, &name, &shaders::product(ty, tile), &[R, R, W, R])
            }));
            embed.push(kernel(gpu, &mut id, &format!("embed_{}", ty.name()), &shaders::embed(ty), &[R, R, W]));
        }
        let k = Self {
            product,
            embed,
            norm: kernel(gpu, &mut id, "norm", shaders::NORM, &[R, R, R, W]),
            glu: kernel(gpu, &mut id, "glu", shaders::GLU, &[R, W]),
            rope_kv: kernel(gpu, &mut id, "rope_kv", shaders::ROPE_KV, &[W, R, R, R, R, R, W, W]),
            attention: kernel(gpu, &mut id, "attention", shaders::ATTENTION, &[R, R, R, R, W, W]),
            attn_combine: kernel(gpu, &mut id, "attn_combine", shaders::ATTN_COMBINE, &[R, W]),
        };
        gpu.check()?;
        Ok(k)
    }
    /// The product over weights of `ty` for `n` input rows, and the input
    /// rows one of its workgroups takes.
    pub(crate) fn product(&self, ty: WeightFormat, n: usize) -> (&Kernel, u32) {
        let i = usize::from(n > 1);
        (&self.product[index(ty)][i], shaders::PRODUCT_TILES[i])
    }
    /// The embedding lookup over weights of `ty`.
    pub(crate) fn embed(&self, ty: WeightFormat) -> &Kernel {
        &self.embed[index(ty)]
    }
}
