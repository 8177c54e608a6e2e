//! kiln-models (under construction)
