//! The wgpu device: picking an adapter (`KILN_WGPU_BACKEND`, `wgpu:N`),
//! opening it with the adapter's own limits, buffers checked against those
//! limits, uploads and read-backs, and the device's errors as
//! [`WgpuError`]s rather than panics.

use std::sync::{Arc, Mutex};

use crate::{AdapterSummary, Result, WgpuError, WgpuOptions};

/// Bytes of one storage buffer binding this backend asks for at most (the
/// adapter may offer less; weights larger than a binding are split).
const MAX_BINDING: u64 = 1 << 30;

/// An open device, its queue and what it allows.
pub(crate) struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) summary: AdapterSummary,
    /// Whether the device was opened with timestamp queries in passes
    /// (asked for by [`WgpuOptions::profile`]).
    pub(crate) profiling: bool,
    /// Kernels compiled with every runtime check
    /// ([`crate::WgpuOptions::checked`]).
    pub(crate) checked: bool,
    /// Rounds between the f16 tiles' folds ([`WgpuOptions::f16_fold`]).
    pub(crate) f16_fold: Option<u32>,
    /// Columns of a round of the cooperative tiles
    /// ([`WgpuOptions::coop_round`], where the workgroup memory allows).
    pub(crate) coop_round: u32,
    /// The cooperative tiles hold each row's columns together
    /// ([`WgpuOptions::coop_k_inner`]).
    pub(crate) coop_k_inner: bool,
    /// The first validation or out-of-memory error the device reported
    /// since it was last checked.
    error: Arc<Mutex<Option<String>>>,
}

/// Which APIs to look on: `KILN_WGPU_BACKEND` (vulkan, metal, dx12, gl),
/// or the primary ones (Vulkan, Metal, DX12): GL's compute is a fallback
/// asked for by name, and probing it needs a display server on Linux.
pub(crate) fn backends(choice: Option<&str>) -> Result<wgpu::Backends> {
    let Some(name) = choice.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(wgpu::Backends::PRIMARY);
    };
    match name.to_ascii_lowercase().as_str() {
        "vulkan" | "vk" => Ok(wgpu::Backends::VULKAN),
        "metal" | "mtl" => Ok(wgpu::Backends::METAL),
        "dx12" | "d3d12" => Ok(wgpu::Backends::DX12),
        "gl" | "gles" | "opengl" => Ok(wgpu::Backends::GL),
        _ => Err(WgpuError::Options(format!(
            "unknown wgpu backend '{name}' in KILN_WGPU_BACKEND (use vulkan, metal, dx12 or gl)"
        ))),
    }
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor { backends, ..wgpu::InstanceDescriptor::new_without_display_handle() })
}

/// The compute-capable adapters, in wgpu's order (`wgpu:N` picks one).
fn adapters(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let all = pollster::block_on(instance(backends).enumerate_adapters(backends));
    all.into_iter()
        .filter(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS))
        .collect()
}

fn summary(index: usize, a: &wgpu::Adapter, limits: &wgpu::Limits, opts: &WgpuOptions) -> AdapterSummary {
    let info = a.get_info();
    let features = a.features();
    let subgroups = features.contains(wgpu::Features::SUBGROUP);
    let sizes = (info.subgroup_min_size, info.subgroup_max_size);
    let coop_matrix = coop_fragment(a, limits);
    let f16_used = opts.f16 && features.contains(wgpu::Features::SHADER_F16);
    // The kernel numbers its subgroups as invocations / 32.
    let coop_default = info.backend == wgpu::Backend::Vulkan && sizes == (32, 32);
    let coop_used = f16_used && coop_matrix.is_some() && opts.coop.unwrap_or(coop_default);
    AdapterSummary {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend).to_ascii_lowercase(),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        max_binding_bytes: limits.max_storage_buffer_binding_size,
        max_buffer_bytes: limits.max_buffer_size,
        max_workgroup_invocations: limits.max_compute_invocations_per_workgroup,
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        f16_used,
        subgroups,
        subgroup_sizes: sizes,
        subgroups_used: opts.subgroups && subgroups && sizes == (32, 32),
        coop_matrix,
        coop_used,
    }
}

/// The fragment of the f16 × f16 → f32 cooperative matrices `a` offers
/// (16 preferred, else 8), with its limits room for the kernels' tiles.
fn coop_fragment(a: &wgpu::Adapter, limits: &wgpu::Limits) -> Option<u32> {
    use wgpu::wgt::CooperativeScalarType as T;
    if !a.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return None;
    }
    let configs = a.cooperative_matrix_properties();
    [16, 8].into_iter().find(|&f| {
        configs
            .iter()
            .any(|c| c.m_size == f && c.n_size == f && c.k_size == f && c.ab_type == T::F16 && c.cr_type == T::F32)
            && limits.max_compute_workgroup_storage_size >= crate::shaders::coop_workgroup_bytes(128, f, 32)
    })
}

/// Every compute-capable adapter of the APIs `choice` allows.
pub(crate) fn list(choice: Option<&str>) -> Result<Vec<AdapterSummary>> {
    let list = adapters(backends(choice)?);
    let opts = WgpuOptions::from_env();
    Ok(list.iter().enumerate().map(|(i, a)| summary(i, a, &a.limits(), &opts)).collect())
}

impl Gpu {
    /// Opens adapter `opts.ordinal` of the chosen APIs.
    pub(crate) fn open(opts: &WgpuOptions) -> Result<Self> {
        let list = adapters(backends(opts.backend.as_deref())?);
        let n = list.len();
        let adapter = list.into_iter().nth(opts.ordinal).ok_or_else(|| {
            WgpuError::Device(if n == 0 {
                "no GPU adapter with compute shaders was found (on Linux: is a Vulkan driver installed? \
                 `vulkaninfo --summary` lists them; Mesa's lavapipe runs on the CPU)"
                    .into()
            } else {
                format!("adapter {} does not exist ({n} found: `kiln list-devices` lists them)", opts.ordinal)
            })
        })?;
        let offered = adapter.limits();
        // The adapter's own limits, the storage binding capped (a 4 GiB
        // binding gains nothing and some drivers misreport it).
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: offered
                .max_storage_buffer_binding_size
                .min(MAX_BINDING)
                .min(opts.max_binding_bytes.unwrap_or(MAX_BINDING).max(256)),
            ..offered.clone()
        };
        if limits.max_storage_buffers_per_shader_stage < 8 || limits.max_compute_invocations_per_workgroup < 256 {
            return Err(WgpuError::Unsupported(format!(
                "adapter '{}' allows {} storage buffers per shader and {} invocations per workgroup \
                 (the kernels need 8 and 256)",
                adapter.get_info().name,
                limits.max_storage_buffers_per_shader_stage,
                limits.max_compute_invocations_per_workgroup
            )));
        }
        let summary = summary(opts.ordinal, &adapter, &limits, opts);
        let profiling = opts.profile && adapter.features().contains(crate::profile::FEATURES);
        if opts.profile && !profiling {
            eprintln!(
                "KILN_WGPU_PROFILE: adapter '{}' has no timestamp queries inside passes; running unprofiled",
                summary.name
            );
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("kiln"),
            required_features: (if profiling { crate::profile::FEATURES } else { wgpu::Features::empty() })
                | (if summary.subgroups_used { wgpu::Features::SUBGROUP } else { wgpu::Features::empty() })
                | (if summary.f16_used { wgpu::Features::SHADER_F16 } else { wgpu::Features::empty() })
                | (if summary.coop_used {
                    wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
                } else {
                    wgpu::Features::empty()
                }),
            required_limits: limits.clone(),
            experimental_features: if summary.coop_used {
                // SAFETY: wgpu's only experimental feature asked for is
                // cooperative matrices, used by product_coop.wgsl alone:
                // fragments of a configuration the adapter lists, loaded
                // and stored within workgroup arrays, in uniform control
                // flow (naga validates it); the tests compare its sums with
                // the f32 tiles' where it runs (tests/kernels.rs).
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| WgpuError::Device(format!("opening '{}': {e}", summary.name)))?;
        let error = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&error);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }));
        // Rounds of 64 columns where the workgroup memory holds them.
        let fits = |round| {
            summary.coop_matrix.is_some_and(|f| {
                limits.max_compute_workgroup_storage_size >= crate::shaders::coop_workgroup_bytes(128, f, round)
            })
        };
        let coop_round = match opts.coop_round.unwrap_or(crate::shaders::COOP_ROUND) {
            64 if fits(64) => 64,
            _ => 32,
        };
        Ok(Self {
            device,
            queue,
            limits,
            summary,
            profiling,
            checked: opts.checked,
            f16_fold: opts.f16_fold,
            coop_round,
            coop_k_inner: opts.coop_k_inner,
            error,
        })
    }

    /// The first error the device reported since the last check.
    pub(crate) fn check(&self) -> Result<()> {
        match self.error.lock().ok().and_then(|mut e| e.take()) {
            Some(e) if e.contains("OutOfMemory") || e.contains("out of memory") => Err(WgpuError::OutOfMemory(e)),
            Some(e) => Err(WgpuError::Device(e)),
            None => Ok(()),
        }
    }

    /// Largest storage buffer one kernel may bind.
    pub(crate) fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// A storage buffer of `bytes` (rounded up to 16 bytes: kernels may
    /// read it as `vec4`s), checked
    /// against the binding limit; `what` names it in errors.
    pub(crate) fn storage(&self, bytes: u64, what: &str) -> Result<wgpu::Buffer> {
        let size = bytes.max(16).div_ceil(16) * 16;
        if size > self.max_binding() {
            return Err(WgpuError::OutOfMemory(format!(
                "{what} needs one buffer of {size} bytes; adapter '{}' binds at most {} bytes",
                self.summary.name,
                self.max_binding()
            )));
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage,
            mapped_at_creation: false,
        });
        self.check().map_err(|e| match e {
            WgpuError::Device(m) | WgpuError::OutOfMemory(m) => WgpuError::OutOfMemory(format!("{what}: {m}")),
            other => other,
        })?;
        Ok(b)
    }

    /// A storage buffer holding `data` (padded with zeros to whole words).
    pub(crate) fn upload(&self, data: &[u8], what: &str) -> Result<wgpu::Buffer> {
        let b = self.storage(data.len() as u64, what)?;
        self.write(&b, 0, data);
        Ok(b)
    }

    /// Writes `data` at `offset` (before the next submission runs).
    pub(crate) fn write(&self, b: &wgpu::Buffer, offset: u64, data: &[u8]) {
        let whole = data.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(b, offset, &data[..whole]);
        }
        if whole < data.len() {
            let mut tail = [0u8; 4];
            tail[..data.len() - whole].copy_from_slice(&data[whole..]);
            self.queue.write_buffer(b, offset + whole as u64, &tail);
        }
    }

    /// A buffer of `bytes` (rounded up to words) to read back through.
    pub(crate) fn read_back_buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size: bytes.div_ceil(4).max(1) * 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Copies the regions `(src, offset, bytes)` (offsets and sizes whole
    /// words) one after another through `staging` (at least as large) to
    /// the host, after every submission so far (waiting for the device),
    /// and hands them to `take`.
    pub(crate) fn read_into(
        &self,
        regions: &[(&wgpu::Buffer, u64, u64)],
        staging: &wgpu::Buffer,
        take: impl FnOnce(&[u8]),
    ) -> Result<()> {
        let size: u64 = regions.iter().map(|r| r.2).sum();
        if size == 0 {
            take(&[]);
            return Ok(());
        }
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("read") });
        let mut at = 0;
        for &(src, offset, bytes) in regions {
            enc.copy_buffer_to_buffer(src, offset, staging, at, bytes);
            at += bytes;
        }
        self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, ..size, move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(|_| WgpuError::Device("a read-back was dropped".into()))?
            .map_err(|e| WgpuError::Device(format!("reading back: {e}")))?;
        {
            let view = staging.get_mapped_range(..size).map_err(|e| WgpuError::Device(format!("reading back: {e}")))?;
            take(&view);
        }
        staging.unmap();
        Ok(())
    }

    /// Waits for every submission so far, then reports any device error.
    pub(crate) fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| WgpuError::Device(format!("waiting for the device: {e}")))?;
        self.check()
    }
}
