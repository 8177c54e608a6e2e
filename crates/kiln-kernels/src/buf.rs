//! Large, aligned, zero-initialized byte buffers for weights and caches.
//!
//! Buffers of 2 MiB or more are aligned to 2 MiB and, on Linux, marked for
//! transparent huge pages *before* they are first written, so the kernel
//! backs them with 2 MiB pages: streaming hundreds of megabytes of weights
//! per token then costs a few hundred TLB entries instead of tens of
//! thousands.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

const HUGE: usize = 2 << 20;

/// A zeroed heap buffer of `len` bytes, 64-byte aligned (2 MiB when large).
pub struct AlignedBytes {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: the buffer is plain owned memory, like a `Vec<u8>`.
unsafe impl Send for AlignedBytes {}
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    /// `len` zero bytes.
    ///
    /// # Panics
    /// When `len` overflows a layout (more than `isize::MAX`); aborts (like
    /// `Vec`) when the allocation fails.
    pub fn zeroed(len: usize) -> Self {
        let align = if len >= HUGE { HUGE } else { 64 };
        let size = len.max(1).next_multiple_of(align);
        let layout = Layout::from_size_align(size, align).expect("buffer size overflows a layout");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { handle_alloc_error(layout) };
        #[cfg(target_os = "linux")]
        if align == HUGE {
            // SAFETY: advice on memory this buffer owns; failure is harmless.
            unsafe { libc::madvise(raw.cast(), size, libc::MADV_HUGEPAGE) };
        }
        Self { ptr, len, layout }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialized (zeroed) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl Clone for AlignedBytes {
    fn clone(&self) -> Self {
        let mut b = Self::zeroed(self.len);
        b.copy_from_slice(self);
        b
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_writable() {
        for len in [0, 1, 100, 3 << 20] {
            let mut b = AlignedBytes::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            assert_eq!(b.as_ptr() as usize % 64, 0);
            if len >= HUGE {
                assert_eq!(b.as_ptr() as usize % HUGE, 0);
            }
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b.clone()[len - 1], 7);
            }
        }
    }
}
