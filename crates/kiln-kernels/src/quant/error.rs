//! The one error type of the kernels crate.
use crate::GgmlType;

/// A kernel was called with inconsistent shapes or an unsupported type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// An element count is not a multiple of the type's block size.
    #[error("{ty}: {len} elements is not a multiple of the block size {block}")]
    NotBlockMultiple {
        /// The element type.
        ty: GgmlType,
        /// The element count given.
        len: usize,
        /// The block size of `ty`.
        block: usize,
    },
    /// A buffer has the wrong length.
    #[error("{what}: expected length {expected}, got {got}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// The length the shapes imply.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The operation is not implemented for this type.
    #[error("{op} is not supported for {ty}")]
    Unsupported {
        /// The operation (`quantize_row`, ...).
        op: &'static str,
        /// The element type.
        ty: GgmlType,
    },
}

/// Checks `got == expected`.
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::Length { what, expected, got })
    }
}

/// Bytes of a row of `n` elements of `ty`, or the error saying why there is none.
pub(crate) fn row_bytes(ty: GgmlType, n: usize) -> Result<usize, KernelError> {
    ty.row_bytes(n).ok_or(KernelError::NotBlockMultiple { ty, len: n, block: ty.block_size() })
}
