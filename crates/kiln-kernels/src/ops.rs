//! Elementwise ops and attention.
