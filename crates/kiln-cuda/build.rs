//! Compiles `kernels/*.cu` to PTX with nvcc when the `cuda` feature is on.
//! nvcc is `$NVCC`, else `$CUDA_HOME/bin/nvcc`, else `nvcc` on the PATH;
//! `CUDA_COMPUTE_CAP` (default 90) picks the target. `KILN_NVCC_FLAGS`
//! (space-separated) adds nvcc arguments, for experiments that compare
//! builds of one kernel, e.g. `-DATTN_PF=0` (see the `#ifndef`s in
//! kernels/).

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
    for name in [
        "elementwise",
        "attention",
        "attention_tc",
        "attention_group",
        "gemv",
        "gemv_tc",
        "quant",
        "mmq",
        "sample",
        "lora",
    ] {
        let src = format!("kernels/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["-ptx", "-O3", "-std=c++17", "--use_fast_math", &format!("-arch=sm_{cap}"), "-o"])
            .arg(&ptx)
            .args(extra.split_whitespace())
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run nvcc ({}): {e}. The `cuda` feature needs a CUDA toolkit: see docs/cuda.md \
                     (eval \"$(../shared/gpu/setup-cuda-toolkit.sh)\")",
                    nvcc.display()
                )
            });
        assert!(status.success(), "nvcc failed on {src}");
    }
}
