//! The backend's bind groups, by kernel and buffers, found without
//! allocating: a dispatch hashes its kernel's number and its buffers'
//! ids and compares them with the entries of that hash (the host records
//! a few hundred dispatches a step, each a lookup here).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// One bind group and what it binds (the buffers are held, so that an id
/// is never reused while its entry lives).
struct Entry {
    kernel: u32,
    buffers: Vec<wgpu::Buffer>,
    group: wgpu::BindGroup,
}

/// FNV-1a over the words it is given (the keys are a kernel's number and
/// buffer ids: no hostile input to guard against).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Bind groups by (kernel, buffers).
#[derive(Default)]
pub(crate) struct BindCache {
    by_hash: HashMap<u64, Vec<Entry>, BuildHasherDefault<Fnv>>,
    len: usize,
}

fn key(kernel: u32, buffers: &[&wgpu::Buffer]) -> u64 {
    let mut h = Fnv::default();
    kernel.hash(&mut h);
    for b in buffers {
        b.hash(&mut h);
    }
    h.finish()
}

impl BindCache {
    /// The bind group of `kernel` over `buffers`, made by `make` the first
    /// time (the cache is emptied first when it holds `max` groups).
    pub(crate) fn get_or_make(
        &mut self,
        kernel: u32,
        buffers: &[&wgpu::Buffer],
        max: usize,
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> &wgpu::BindGroup {
        let h = key(kernel, buffers);
        let same = |e: &Entry| {
            e.kernel == kernel
                && e.buffers.len() == buffers.len()
                && e.buffers.iter().zip(buffers).all(|(a, &b)| a == b)
        };
        let hit = self.by_hash.get(&h).and_then(|v| v.iter().position(same));
        let i = match hit {
            Some(i) => i,
            None => {
                if self.len >= max {
                    self.clear();
                }
                let entry = Entry { kernel, buffers: buffers.iter().map(|&b| b.clone()).collect(), group: make() };
                let list = self.by_hash.entry(h).or_default();
                list.push(entry);
                self.len += 1;
                list.len() - 1
            }
        };
        &self.by_hash[&h][i].group
    }

    /// Forgets every group (a buffer they bind was replaced).
    pub(crate) fn clear(&mut self) {
        self.by_hash.clear();
        self.len = 0;
    }
}
