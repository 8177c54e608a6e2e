//! Log output for `kiln serve --log-format json`: a JSON subscriber the
//! binary can install for the server's threads.

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;

/// A dispatcher writing one JSON object per event to stderr, filtered by
/// `filter` (e.g. `info`, `kiln_server=debug`).
pub fn json_dispatch(filter: &str) -> Dispatch {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let sub = tracing_subscriber::fmt().json().with_env_filter(filter).with_writer(std::io::stderr).finish();
    Dispatch::new(sub)
}
