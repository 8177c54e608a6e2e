//! Model families, one file each.

pub mod llama;
