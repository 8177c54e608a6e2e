//! `kiln bench` (being built).

use anyhow::Result;
use clap::Args;

/// Arguments of `kiln bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {}

/// Runs `kiln bench`.
pub fn run(_a: BenchArgs) -> Result<()> {
    anyhow::bail!("`kiln bench` is not built yet")
}
