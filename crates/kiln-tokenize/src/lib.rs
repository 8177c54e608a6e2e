//! kiln-tokenize (under construction)
