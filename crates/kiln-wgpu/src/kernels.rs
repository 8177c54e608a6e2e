//! The compiled kernels of one device (every module of [`crate::shaders`]
//! is compiled when the device opens, so a driver that rejects one fails
//! at open, not mid-step), and how a dispatch binds them.

use crate::gpu::Gpu;
use crate::shaders::{self, WeightFormat};
use crate::Result;

/// One compute pipeline per kernel.
pub(crate) struct Kernels {
    product: Vec<wgpu::ComputePipeline>,
    embed: Vec<wgpu::ComputePipeline>,
    pub(crate) norm: wgpu::ComputePipeline,
    pub(crate) glu: wgpu::ComputePipeline,
    pub(crate) rope_kv: wgpu::ComputePipeline,
    pub(crate) attention: wgpu::ComputePipeline,
}

fn pipeline(gpu: &Gpu, name: &str, src: &str) -> wgpu::ComputePipeline {
    let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

fn index(ty: WeightFormat) -> usize {
    WeightFormat::ALL.iter().position(|&t| t == ty).unwrap_or(0)
}

impl Kernels {
    /// Compiles every kernel on `gpu`.
    pub(crate) fn new(gpu: &Gpu) -> Result<Self> {
        let per_format = |kind: &str, src: fn(WeightFormat) -> String| {
            WeightFormat::ALL.iter().map(|&ty| pipeline(gpu, &format!("{kind}_{}", ty.name()), &src(ty))).collect()
        };
        let k = Self {
            product: per_format("product", shaders::product),
            embed: per_format("embed", shaders::embed),
            norm: pipeline(gpu, "norm", shaders::NORM),
            glu: pipeline(gpu, "glu", shaders::GLU),
            rope_kv: pipeline(gpu, "rope_kv", shaders::ROPE_KV),
            attention: pipeline(gpu, "attention", shaders::ATTENTION),
        };
        gpu.check()?;
        Ok(k)
    }
    /// The product over weights of `ty`.
    pub(crate) fn product(&self, ty: WeightFormat) -> &wgpu::ComputePipeline {
        &self.product[index(ty)]
    }
    /// The embedding lookup over weights of `ty`.
    pub(crate) fn embed(&self, ty: WeightFormat) -> &wgpu::ComputePipeline {
        &self.embed[index(ty)]
    }
}
