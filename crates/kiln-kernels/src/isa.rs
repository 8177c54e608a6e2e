//! The instruction-set level the kernels run at: one decision for every
//! dispatch site.
//!
//! [`CpuIsa::detected`] is the best level this CPU supports (read once from
//! its feature flags). A cap lowers it, so every path runs on one machine:
//! the `KILN_CPU_ISA` environment variable (`scalar`, `avx2`, `avx2-vnni`,
//! `avx512`), read on first use, or [`set_cap`]. [`CpuIsa::current`] is the
//! lower of the two, and each kernel picks its path from it.
//!
//! | level | needs | used for |
//! | --- | --- | --- |
//! | `scalar` | nothing (portable Rust, every platform) | reference and fallback |
//! | `avx2` | AVX2, FMA, F16C | 256-bit kernels, `vpmaddubsw` integer dots |
//! | `avx2-vnni` | the above and AVX-VNNI | the same with 256-bit `vpdpbusd` |
//! | `avx512` | AVX-512 F/BW/VL/VNNI, FMA, F16C | 512-bit kernels |
//!
//! AVX-512 BF16 is an extra on top of `avx512` ([`has_avx512_bf16`]).

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, ordered from least to most capable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuIsa {
    /// Portable Rust, every platform.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// [`CpuIsa::Avx2`] and AVX-VNNI (256-bit `vpdpbusd`).
    Avx2Vnni,
    /// x86-64 AVX-512 F/BW/VL + VNNI, with FMA and F16C.
    Avx512,
}

/// A level name that is not one of [`CpuIsa::ALL`]'s, or a level this CPU lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// Not a level name.
    #[error("unknown CPU instruction set `{0}` (expected scalar, avx2, avx2-vnni or avx512)")]
    Unknown(String),
    /// The CPU cannot run the level.
    #[error("this CPU does not support `{wanted}` (its best is `{best}`)")]
    Unsupported {
        /// The level asked for.
        wanted: CpuIsa,
        /// The best level this CPU has.
        best: CpuIsa,
    },
}

impl CpuIsa {
    /// Every level, least capable first.
    pub const ALL: [CpuIsa; 4] = [Self::Scalar, Self::Avx2, Self::Avx2Vnni, Self::Avx512];

    /// The name used by `--cpu-isa` and `KILN_CPU_ISA`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx2Vnni => "avx2-vnni",
            Self::Avx512 => "avx512",
        }
    }

    /// Whether this CPU can run the level.
    pub fn is_supported(self) -> bool {
        match self {
            Self::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Self::Avx2Vnni => Self::Avx2.is_supported() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => {
                Self::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best level this CPU supports (detected once).
    pub fn detected() -> Self {
        static BEST: std::sync::OnceLock<CpuIsa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Self::ALL.into_iter().rev().find(|l| l.is_supported()).unwrap_or(Self::Scalar))
    }

    /// The level the kernels run at now: [`CpuIsa::detected`], lowered by
    /// the cap ([`set_cap`], else `KILN_CPU_ISA`).
    pub fn current() -> Self {
        let cap = match CAP.load(Ordering::Relaxed) {
            UNREAD => {
                // An unusable value in the environment is the CLI's to
                // report; the kernels then run uncapped.
                let env = std::env::var("KILN_CPU_ISA").ok().and_then(|v| v.parse::<CpuIsa>().ok());
                let code = env.map_or(NONE, |l| l as u8);
                // A `set_cap` that ran meanwhile wins.
                let _ = CAP.compare_exchange(UNREAD, code, Ordering::Relaxed, Ordering::Relaxed);
                CAP.load(Ordering::Relaxed)
            }
            c => c,
        };
        let best = Self::detected();
        Self::from_code(cap).map_or(best, |c| c.min(best))
    }

    fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c)).copied()
    }
}

impl std::fmt::Display for CpuIsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CpuIsa {
    type Err = IsaError;

    fn from_str(s: &str) -> Result<Self, IsaError> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL.into_iter().find(|l| l.name() == s).ok_or(IsaError::Unknown(s))
    }
}

/// `CAP` before the environment was read.
const UNREAD: u8 = 0xFF;
/// `CAP` when nothing caps the level.
const NONE: u8 = 0xFE;
static CAP: AtomicU8 = AtomicU8::new(UNREAD);

/// Caps the level at `cap` (`None`: no cap, the CPU's best), overriding
/// `KILN_CPU_ISA`. Set it before loading a model: weights are repacked at
/// load time for the SIMD levels.
///
/// # Errors
/// [`IsaError::Unsupported`] when this CPU cannot run `cap` (nothing changes).
pub fn set_cap(cap: Option<CpuIsa>) -> Result<(), IsaError> {
    if let Some(c) = cap {
        if !c.is_supported() {
            return Err(IsaError::Unsupported { wanted: c, best: CpuIsa::detected() });
        }
    }
    CAP.store(cap.map_or(NONE, |c| c as u8), Ordering::Relaxed);
    Ok(())
}

/// Whether the prompt attention can use AVX-512 BF16 dot products: the
/// current level is [`CpuIsa::Avx512`] and the CPU has AVX-512 BF16.
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        CpuIsa::current() == CpuIsa::Avx512 && *OK.get_or_init(|| is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Held by [`for_each_level`] while it changes the cap; a test that needs
/// the level to stay put (one that checks which kernel ran) holds it too.
#[doc(hidden)]
pub fn level_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` once per level this CPU supports, with the cap set to it, and
/// restores the cap after (tests: every path against one reference). The
/// cap is process-wide: tests that use this hold a lock so they do not
/// change each other's level mid-run.
#[doc(hidden)]
pub fn for_each_level(mut f: impl FnMut(CpuIsa)) {
    let _guard = level_lock();
    let _ = CpuIsa::current(); // reads the environment once
    let before = CAP.load(Ordering::Relaxed);
    for level in CpuIsa::ALL.into_iter().filter(|l| l.is_supported()) {
        let _ = set_cap(Some(level));
        f(level);
    }
    CAP.store(before, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for l in CpuIsa::ALL {
            assert_eq!(l.name().parse::<CpuIsa>(), Ok(l));
        }
        assert_eq!("AVX2_VNNI".parse::<CpuIsa>(), Ok(CpuIsa::Avx2Vnni));
        assert!(matches!("sse".parse::<CpuIsa>(), Err(IsaError::Unknown(_))));
    }

    #[test]
    fn the_cap_lowers_the_level() {
        let before = CpuIsa::current();
        for_each_level(|l| assert_eq!(CpuIsa::current(), l));
        assert_eq!(CpuIsa::current(), before);
        assert!(CpuIsa::Scalar.is_supported());
    }
}
