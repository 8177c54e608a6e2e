//! KV (wip)
