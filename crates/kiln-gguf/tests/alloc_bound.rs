//! A corrupt count must never trigger a huge allocation: the largest single
//! allocation while parsing hostile bytes stays within a small multiple of
//! the input size. (Own test binary: the counting allocator is global.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{sample_file, Raw, Rng};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Largest single allocation made by `parse(bytes)` (the input copy included).
fn largest_alloc(bytes: &[u8]) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    let _ = kiln_gguf::parse(bytes);
    LARGEST.load(Ordering::Relaxed)
}

#[test]
fn hostile_counts_allocate_little() {
    let bound = |len: usize| 4 * len + 16 * 1024;
    // Hand-made worst cases: counts that would ask for terabytes.
    let mut cases = vec![Raw::header(3, u64::MAX / 64, 0).build(), Raw::header(3, 0, u64::MAX / 16).build()];
    for elem in [0u32, 4, 8, 9] {
        let mut r = Raw::header(3, 0, 1);
        r.str("a").u32(9).u32(elem).u64(1 << 40).bytes(&[0; 64]);
        cases.push(r.build());
    }
    for b in &cases {
        let got = largest_alloc(b);
        assert!(got <= bound(b.len()), "{got} bytes allocated for a {}-byte input", b.len());
    }
    // Random corruptions of a valid file.
    let base = sample_file();
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let mut b = base.clone();
        let at = rng.below(b.len() - 8);
        let v = [u64::MAX, 1 << 40, 1 << 33, 0xFFFF_FFFF][rng.below(4)];
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        let got = largest_alloc(&b);
        assert!(got <= bound(b.len()), "{got} bytes for a {}-byte input (patch at {at})", b.len());
    }
}
