//! Progress bars on stderr (hidden unless asked for; indicatif also hides
//! them by itself when stderr is not a terminal).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-counting bar of `len` bytes.
pub(crate) fn bytes_bar(len: u64, message: &str, show: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), target(show));
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.to_string());
    bar
}

/// A spinner for a step of unknown length.
pub(crate) fn spinner(message: &str, show: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target(show));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.to_string());
    if show {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    bar
}

fn target(show: bool) -> ProgressDrawTarget {
    if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
