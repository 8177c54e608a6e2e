//! Locating test data fetched by `scripts/fetch-vocab-vectors.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `$var` if set, else the last stdout line of the fetch script run with `args`.
pub fn fetched_path(var: &str, args: &[&str]) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    // Tests of one binary run in parallel threads: fetch one at a time (the
    // script itself is also safe across processes).
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-vocab-vectors.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "fetch-vocab-vectors.sh {args:?} failed (set {var} to skip it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}
