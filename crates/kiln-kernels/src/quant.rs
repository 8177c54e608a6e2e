//! GGUF block formats.
