//! A persistent thread pool for the hot path.
//!
//! `run(f)` calls `f(ith, nth)` once on each of `nth` threads (the calling
//! thread is `ith == 0`) and returns when all are done. Workers spin briefly
//! between jobs (a decode step issues hundreds of jobs a few microseconds
//! apart) and then sleep on a condition variable, so an idle engine costs no
//! CPU. No allocation happens per job.
//!
//! **Pinning.** [`ThreadPool::pinned`] keeps each thread on its own CPU.
//! Without it, a worker woken after the pool slept (a request after idle
//! time) can be placed on the CPU of the thread that woke it, which is
//! spinning in `run`: the two then share one CPU until the kernel's load
//! balancer moves one of them, several milliseconds later. Measured here
//! (`examples/pool-wake`, 2 threads, 100 jobs of ~70 µs after 300 ms idle):
//! 6.8–7.2 ms pinned, 6.8–19 ms (median 13) unpinned, against 6.7–6.9 ms
//! back to back either way.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = dyn Fn(usize, usize) + Sync;

/// Busy-spin iterations before a waiting worker starts yielding its core.
const SPIN_PURE: u32 = 2_000;
/// How long a worker keeps polling (spinning, then yielding) before it
/// sleeps on the condition variable. Yielding keeps latency low between the
/// jobs of a forward pass without starving other threads when the machine
/// is oversubscribed.
const POLL_FOR: std::time::Duration = std::time::Duration::from_millis(5);

struct Shared {
    epoch: AtomicU64,
    job: UnsafeCell<Option<*const Job>>,
    remaining: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

// SAFETY: `job` is written only by the thread holding `ThreadPool::caller`
// before `epoch` is bumped and read by workers only after they observe the
// bump; it is cleared only after every worker has finished with it.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// A fixed set of worker threads that run data-parallel jobs.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n_threads: usize,
    caller: Mutex<()>,
    /// The CPU of each thread (the caller's first) when pinned.
    cpus: Option<Vec<usize>>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool").field("n_threads", &self.n_threads).finish()
    }
}

impl ThreadPool {
    /// A pool of `n_threads` threads in all (the caller counts as one); 0 means 1.
    pub fn new(n_threads: usize) -> Self {
        Self::build(n_threads, None)
    }

    /// A pool of `n_threads` threads, each kept on its own CPU of the set
    /// this process may use (see the module docs): worker `i` on the set's
    /// `i`-th CPU, the caller on its first once it calls
    /// [`ThreadPool::pin_caller`]. Only when the set has exactly one CPU per
    /// thread (the default thread count, or a `taskset` / cpuset made for
    /// it): with more CPUs than threads, which ones to leave free is not the
    /// pool's choice (other work, a container limited by CPU time rather
    /// than by CPUs), and with fewer the threads must share. Otherwise, or
    /// where affinity cannot be set (not Linux), the pool is not pinned:
    /// [`ThreadPool::is_pinned`] says which.
    pub fn pinned(n_threads: usize) -> Self {
        let n = n_threads.max(1);
        let cpus = affinity::allowed_cpus().filter(|c| n > 1 && c.len() == n);
        Self::build(n, cpus)
    }

    /// Whether the pool's threads are pinned.
    pub fn is_pinned(&self) -> bool {
        self.cpus.is_some()
    }

    /// Keeps the calling thread (the one that will call [`ThreadPool::run`])
    /// on the pool's first CPU; does nothing for a pool that is not pinned.
    /// Returns whether the thread is pinned.
    pub fn pin_caller(&self) -> bool {
        self.cpus.as_ref().and_then(|c| c.first()).is_some_and(|&cpu| affinity::pin_current(cpu))
    }

    fn build(n_threads: usize, cpus: Option<Vec<usize>>) -> Self {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                let cpu = cpus.as_ref().and_then(|c| c.get(ith).copied());
                std::thread::Builder::new()
                    .name(format!("kiln-worker-{ith}"))
                    .spawn(move || {
                        if let Some(cpu) = cpu {
                            affinity::pin_current(cpu);
                        }
                        worker_loop(&shared, ith, n_threads)
                    })
                    .expect("spawning a kernel worker thread")
            })
            .collect();
        Self { shared, workers, n_threads, caller: Mutex::new(()), cpus }
    }

    /// Number of threads, the caller included.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `f(ith, nth)` on every thread and waits for all of them.
    ///
    /// # Panics
    /// Re-raises (as a new panic) a panic raised by `f` on any thread.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let n = self.n_threads;
        if n == 1 {
            f(0, 1);
            return;
        }
        let _guard = self.caller.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: erase the lifetime; the job is cleared before `run` returns
        // and every worker is done with it by then (`remaining` reaches 0).
        let ptr: *const Job = unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), &'static Job>(f) };
        unsafe { *s.job.get() = Some(ptr) };
        s.remaining.store(n - 1, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, n)));
        let mut spins = 0u32;
        while s.remaining.load(SeqCst) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        unsafe { *s.job.get() = None };
        if mine.is_err() || s.panicked.swap(false, SeqCst) {
            panic!("a kernel panicked on a pool thread");
        }
    }
}

fn worker_loop(s: &Shared, ith: usize, nth: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let mut since: Option<std::time::Instant> = None;
        loop {
            let e = s.epoch.load(SeqCst);
            if e != seen || s.shutdown.load(SeqCst) {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins < SPIN_PURE {
                std::hint::spin_loop();
                continue;
            }
            let start = *since.get_or_insert_with(std::time::Instant::now);
            if start.elapsed() < POLL_FOR {
                std::thread::yield_now();
                continue;
            }
            let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, SeqCst);
            while s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
                g = s.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, SeqCst);
            break;
        }
        if s.shutdown.load(SeqCst) {
            return;
        }
        seen = s.epoch.load(SeqCst);
        // SAFETY: see `Shared`.
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            let r = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(ith, nth) }));
            if r.is_err() {
                s.panicked.store(true, SeqCst);
            }
        }
        s.remaining.fetch_sub(1, SeqCst);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        {
            let _l = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.cv.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// CPU affinity, where the OS has it.
mod affinity {
    /// The CPUs this process may run on, in increasing order (its cpuset or
    /// `taskset` mask); `None` where that cannot be read.
    #[cfg(target_os = "linux")]
    pub(super) fn allowed_cpus() -> Option<Vec<usize>> {
        // SAFETY: `cpu_set_t` is plain data; the call writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0;
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `c < max`, inside the set.
        ok.then(|| (0..max).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
    }

    /// Keeps the calling thread on `cpu`; whether that worked.
    #[cfg(target_os = "linux")]
    pub(super) fn pin_current(cpu: usize) -> bool {
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return false;
        }
        // SAFETY: as above; `cpu` is inside the set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu, &mut set) };
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn allowed_cpus() -> Option<Vec<usize>> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn pin_current(_cpu: usize) -> bool {
        false
    }
}

/// Splits `0..n` into `nth` contiguous parts and returns part `ith`.
pub fn split_range(n: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
    let per = n / nth;
    let rem = n % nth;
    let start = ith * per + ith.min(rem);
    let len = per + usize::from(ith < rem);
    start..start + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_thread_runs_once_per_job() {
        let pool = ThreadPool::new(3);
        for _ in 0..1000 {
            let hits = AtomicUsize::new(0);
            let mask = AtomicUsize::new(0);
            pool.run(&|ith, nth| {
                assert_eq!(nth, 3);
                hits.fetch_add(1, SeqCst);
                mask.fetch_or(1 << ith, SeqCst);
            });
            assert_eq!(hits.load(SeqCst), 3);
            assert_eq!(mask.load(SeqCst), 0b111);
        }
    }

    #[test]
    fn wakes_after_sleeping() {
        let pool = ThreadPool::new(2);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let hits = AtomicUsize::new(0);
        pool.run(&|_, _| {
            hits.fetch_add(1, SeqCst);
        });
        assert_eq!(hits.load(SeqCst), 2);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_pool_runs_each_thread_on_its_own_cpu() {
        let cpus = affinity::allowed_cpus().expect("the affinity mask reads on Linux");
        let n = cpus.len();
        // More threads than CPUs, or fewer: left to the scheduler.
        assert!(!ThreadPool::pinned(n + 1).is_pinned());
        assert!(!ThreadPool::pinned(1).is_pinned());
        if n > 2 {
            assert!(!ThreadPool::pinned(2).is_pinned());
        }
        if !(2..=64).contains(&n) {
            return;
        }
        // A thread of its own, so the test thread keeps its affinity.
        std::thread::spawn(move || {
            let pool = ThreadPool::pinned(n);
            assert!(pool.is_pinned());
            assert!(pool.pin_caller());
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(usize::MAX)).collect();
            for _ in 0..20 {
                pool.run(&|ith, _| {
                    // SAFETY: no arguments; returns the CPU this thread runs on.
                    let cpu = unsafe { libc::sched_getcpu() };
                    seen[ith].store(cpu as usize, SeqCst);
                });
                for (i, s) in seen.iter().enumerate() {
                    assert_eq!(s.load(SeqCst), cpus[i], "thread {i}");
                }
            }
        })
        .join()
        .expect("the pinned pool's thread");
    }

    #[test]
    fn split_range_covers_everything() {
        for n in 0..50 {
            for nth in 1..6 {
                let mut next = 0;
                for ith in 0..nth {
                    let r = split_range(n, ith, nth);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn worker_panic_is_reported_and_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|ith, _| {
                if ith == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let hits = AtomicUsize::new(0);
        pool.run(&|_, _| {
            hits.fetch_add(1, SeqCst);
        });
        assert_eq!(hits.load(SeqCst), 2);
    }
}
