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
    let nvcc_ptx = |src: &str, ptx: PathBuf, defines: &[String]| {
        let status = Command::new(&nvcc)
            .args(["-ptx", "-O3", "-std=c++17", "--use_fast_math", &format!("-arch=sm_{cap}"), "-o"])
            .arg(&ptx)
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
    };
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
        nvcc_ptx(&format!("kernels/{name}.cu"), out.join(format!("{name}.ptx")), &[]);
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
                [format!("-DKV_K={k}"), format!("-DKV_KF={kf}"), format!("-DKV_V={v}"), format!("-DKV_VF={vf}")];
            nvcc_ptx("kernels/kv_quant.cu", out.join(format!("kv_quant_{k}_{v}.ptx")), &defines);
        }
    }
}
