//! `KILN_WGPU_PROFILE=1`: GPU time per kernel, from timestamps written
//! between a step's dispatches, summed over the backend's life and printed
//! to stderr when it is dropped. Each step then waits for its timestamps,
//! so the steps themselves run slower; the table is for finding which
//! kernel to work on, not for speeds. Needs the adapter's
//! `TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_PASSES` (the open says so
//! when it lacks them and runs unprofiled).

use std::collections::HashMap;
use std::sync::Arc;

use crate::gpu::Gpu;
use crate::{Result, WgpuError};

/// Timestamps one step may write (dispatches past this are not timed).
const MAX_QUERIES: u32 = 4096;

/// The features profiling needs.
pub(crate) const FEATURES: wgpu::Features =
    wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// Timestamps of the current step and the totals so far.
pub(crate) struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    period_ns: f64,
    /// The kernel of each timed dispatch of the current step.
    names: Vec<Arc<str>>,
    /// Per kernel: nanoseconds and dispatches.
    totals: HashMap<Arc<str>, (f64, u64)>,
    steps: u64,
    /// Host nanoseconds spent recording and submitting steps (from
    /// `Backend::run`'s start to the submit's return), and the dispatches.
    host_ns: f64,
    dispatches: u64,
    /// Host nanoseconds spent reading the logits back (`Backend::finish`,
    /// after the step's kernels ended: the profile waited for them).
    read_ns: f64,
}

impl Profiler {
    pub(crate) fn new(gpu: &Gpu) -> Self {
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: MAX_QUERIES,
        });
        let bytes = 8 * MAX_QUERIES as u64;
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let period_ns = f64::from(gpu.queue.get_timestamp_period());
        Self {
            set,
            resolve,
            read,
            period_ns,
            names: Vec::new(),
            totals: HashMap::new(),
            steps: 0,
            host_ns: 0.0,
            dispatches: 0,
            read_ns: 0.0,
        }
    }

    /// Before a dispatch of kernel `name`: its start (the previous one's end).
    pub(crate) fn before(&mut self, pass: &mut wgpu::ComputePass<'static>, name: &Arc<str>) {
        let i = self.names.len() as u32;
        if i + 1 < MAX_QUERIES {
            pass.write_timestamp(&self.set, i);
            self.names.push(Arc::clone(name));
        }
    }

    /// At the end of the step's pass: the last dispatch's end.
    pub(crate) fn end_pass(&mut self, pass: &mut wgpu::ComputePass<'static>) {
        if !self.names.is_empty() {
            pass.write_timestamp(&self.set, self.names.len() as u32);
        }
    }

    /// After the pass ended: resolves the step's timestamps for [`Self::collect`].
    pub(crate) fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        let n = self.names.len() as u32 + 1;
        if n > 1 {
            enc.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
            enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, 8 * u64::from(n));
        }
    }

    /// A step's host time: `ns` from the start of its recording to its
    /// submit, `dispatches` recorded.
    pub(crate) fn host(&mut self, ns: f64, dispatches: u64) {
        self.host_ns += ns;
        self.dispatches += dispatches;
    }

    /// A step's read-back of its logits took `ns`.
    pub(crate) fn read_back(&mut self, ns: f64) {
        self.read_ns += ns;
    }

    /// After the step was submitted: waits for it and adds its times up.
    pub(crate) fn collect(&mut self, gpu: &Gpu) -> Result<()> {
        let names = std::mem::take(&mut self.names);
        if names.is_empty() {
            return Ok(());
        }
        let bytes = 8 * (names.len() as u64 + 1);
        let (tx, rx) = std::sync::mpsc::channel();
        self.read.map_async(wgpu::MapMode::Read, ..bytes, move |r| {
            let _ = tx.send(r);
        });
        gpu.wait()?;
        rx.recv()
            .map_err(|_| WgpuError::Device("a profile read-back was dropped".into()))?
            .map_err(|e| WgpuError::Device(format!("reading the profile: {e}")))?;
        {
            let view = self
                .read
                .get_mapped_range(..bytes)
                .map_err(|e| WgpuError::Device(format!("reading the profile: {e}")))?;
            let t: Vec<u64> =
                view.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
            for (i, name) in names.iter().enumerate() {
                let ns = t[i + 1].saturating_sub(t[i]) as f64 * self.period_ns;
                let e = self.totals.entry(Arc::clone(name)).or_insert((0.0, 0));
                e.0 += ns;
                e.1 += 1;
            }
        }
        self.read.unmap();
        self.steps += 1;
        Ok(())
    }

    /// The table: per kernel, total and mean time and its share.
    pub(crate) fn report(&self) -> String {
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let all: f64 = rows.iter().map(|r| r.1 .0).sum();
        let steps = self.steps.max(1) as f64;
        let mut out = format!(
            "wgpu profile: {} steps, {:.3} ms of kernels per step; the host recorded and submitted each in {:.3} ms \
             ({:.0} dispatches, {:.2} us each; the GPU waits meanwhile) and read its logits back in {:.3} ms\n{:<16} {:>10} {:>10} {:>10} {:>7}\n",
            self.steps,
            all / 1e6 / steps,
            self.host_ns / 1e6 / steps,
            self.dispatches as f64 / steps,
            self.host_ns / 1e3 / self.dispatches.max(1) as f64,
            self.read_ns / 1e6 / steps,
            "kernel",
            "dispatches",
            "total ms",
            "mean us",
            "share"
        );
        for (name, (ns, n)) in rows {
            out.push_str(&format!(
                "{name:<16} {n:>10} {:>10.3} {:>10.2} {:>6.1}%\n",
                ns / 1e6,
                ns / 1e3 / *n as f64,
                100.0 * ns / all.max(1.0)
            ));
        }
        out
    }
}
