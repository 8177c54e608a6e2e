//! `kiln serve` (being built: see crates/kiln-server).

use anyhow::Result;
use clap::Args;

/// Arguments of `kiln serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {}

/// Runs `kiln serve`.
pub fn run(_a: ServeArgs) -> Result<()> {
    anyhow::bail!("`kiln serve` is not built yet")
}
