//! Compiles `kernels/*.cu` with nvcc when the `cuda` feature is on, each
//! to a fat binary holding machine code (SASS) for `CUDA_COMPUTE_CAP`
//! (default 90) and its PTX: a GPU of that architecture loads the machine
//! code as it is, while any other one has the driver compile the PTX at
//! first start (tens of seconds to minutes for the quantized products; the
//! driver keeps the result in its cache). nvcc is `$NVCC`, else
//! `$CUDA_HOME/bin/nvcc`, else `nvcc` on the PATH. `KILN_NVCC_FLAGS`
//! (space-separated) adds nvcc arguments, for experiments that compare
//! builds of one kernel, e.g. `-DATTN_PF=0` (see the `#ifndef`s in
//! kernels/). The files compile in parallel, one per core; a file whose
//! source, headers (`kernels/*.cuh`) and flags match the stamp of its last
//! build is not compiled again.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=KILN_NVCC_FLAGS");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var("NVCC").ok().map(PathBuf::from).unwrap_or_else(|| match std::env::var("CUDA_HOME") {
        Ok(h) => PathBuf::from(h).join("bin/nvcc"),
        Err(_) => PathBuf::from("nvcc"),
    });
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let extra = std::env::var("KILN_NVCC_FLAGS").unwrap_or_default();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let code = format!("arch=compute_{cap},code=[sm_{cap},compute_{cap}]");
    // Every header, for the stamps below (a .cu file includes any of them).
    let mut headers: Vec<PathBuf> = std::fs::read_dir("kernels")
        .expect("kernels/ is there")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cuh"))
        .collect();
    headers.sort();
    let header_bytes: Vec<u8> = headers.iter().flat_map(|h| std::fs::read(h).expect("a readable header")).collect();
    let compile = |src: &str, image: &PathBuf, defines: &[String]| {
        // An image whose sources, headers and flags are unchanged since it
        // was built is kept: a change to one kernel file recompiles only it
        // (and a header change all of them).
        let stamp = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (nvcc.as_os_str(), &code, &extra, defines, &header_bytes).hash(&mut h);
            std::fs::read(src).expect("a readable kernel file").hash(&mut h);
            format!("{:016x}", h.finish())
        };
        let stamp_path = image.with_extension("stamp");
        if image.exists() && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
            return;
        }
        let status = Command::new(&nvcc)
            .args(["-fatbin", "-O3", "-std=c++17", "--use_fast_math", "-gencode", &code, "-o"])
            .arg(image)
            .args(defines)
            .args(extra.split_whitespace())
            .arg(src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run nvcc ({}): {e}. The `cuda` feature needs a CUDA toolkit: see docs/cuda.md \
                     (eval \"$(../shared/gpu/setup-cuda-toolkit.sh)\")",
                    nvcc.display()
                )
            });
        assert!(status.success(), "nvcc failed on {src} {defines:?}");
        std::fs::write(&stamp_path, stamp).expect("OUT_DIR is writable");
    };
    let mut jobs: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
    for name in [
        "elementwise",
        "attention",
        "attention_tc",
        "attention_group",
        "gemv",
        "gemv_tc",
        "quant",
        "mmq",
        "mmq_reg",
        "sample",
        "lora",
    ] {
        jobs.push((format!("kernels/{name}.cu"), out.join(format!("{name}.fatbin")), Vec::new()));
    }
    // The quantized KV cache's kernels, one module per (K, V) pair
    // (kernels/kv_quant.cu; src/kv_quant.rs loads them).
    let sides = [("f16", "KvSideF16"), ("q8_0", "KvSideQ8"), ("q4_0", "KvSideQ4")];
    for (k, kf) in sides {
        for (v, vf) in sides {
            if k == "f16" && v == "f16" {
                continue;
            }
            let defines =
                vec![format!("-DKV_K={k}"), format!("-DKV_KF={kf}"), format!("-DKV_V={v}"), format!("-DKV_VF={vf}")];
            jobs.push(("kernels/kv_quant.cu".into(), out.join(format!("kv_quant_{k}_{v}.fatbin")), defines));
        }
    }
    // The slowest files first (the quantized products), so that the last
    // ones to finish are short.
    jobs.sort_by_key(|(src, _, _)| std::cmp::Reverse(std::fs::metadata(src).map_or(0, |m| m.len())));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers.min(jobs.len()) {
            s.spawn(|| loop {
                let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((src, image, defines)) = jobs.get(j) else { break };
                compile(src, image, defines);
            });
        }
    });
}
