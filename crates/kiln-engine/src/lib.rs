//! kiln-engine (under construction)
