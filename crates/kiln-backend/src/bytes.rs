//! Weight bytes shared with their owner (a memory-mapped model file), sliced
//! without copying, so a backend that computes from host memory (the CPU)
//! reads the file's pages in place and one that uploads (a GPU) copies once.

use std::sync::Arc;

/// Bytes owned by something shared (a memory map), sliced without copying.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
    /// The owner is a read-only file mapping.
    mapped: bool,
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({}..{})", self.start, self.start + self.len)
    }
}

impl SharedBytes {
    /// A view of `owner[start..start + len]`; `None` if out of range.
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        ((*owner).as_ref().len() >= end).then_some(Self { owner, start, len, mapped: false })
    }
    /// Marks the owner as a read-only file mapping (see [`Self::release_pages`]).
    pub fn with_mapped(mut self, mapped: bool) -> Self {
        self.mapped = mapped;
        self
    }
    /// Owns a plain buffer.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Self { owner: Arc::new(v), start: 0, len, mapped: false }
    }
    /// Bytes `start..start + len` of these bytes (same owner, no copy);
    /// `None` if out of range.
    pub fn slice(&self, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| Self { start: self.start + start, len, ..self.clone() })
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }

    /// Tells the OS that the pages fully inside these bytes are not needed
    /// now, so they leave this process's resident memory. For a read-only
    /// file mapping (model files) the data stays valid: a later read pages
    /// it back in from the file. Owned buffers are left alone.
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if self.mapped {
            let page = 4096usize;
            let start = self.as_slice().as_ptr() as usize;
            let (lo, hi) = (start.div_ceil(page) * page, (start + self.len) / page * page);
            if hi > lo {
                // SAFETY: the range lies inside a live read-only file mapping
                // (`mapped`), for which MADV_DONTNEED only drops resident
                // pages; their contents are re-read from the file on access.
                unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
            }
        }
    }
}
