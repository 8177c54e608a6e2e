//! `kiln list-devices`: what `--device` may name in this build: the CPU
//! (its instruction-set level), CUDA when built in, and every wgpu adapter
//! with the limits and features the wgpu backend uses.

use anyhow::Result;

/// `kiln list-devices` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ListDevicesArgs {
    /// Only the adapters of this API (vulkan, metal, dx12, gl; default:
    /// `KILN_WGPU_BACKEND`, else Vulkan, Metal and DX12).
    #[arg(long, env = "KILN_WGPU_BACKEND")]
    wgpu_backend: Option<String>,
    /// Print JSON (one object: the CPU level and the wgpu adapters).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: ListDevicesArgs) -> Result<()> {
    let cpu = kiln_engine::CpuIsa::current();
    let adapters = kiln_wgpu::list_adapters(a.wgpu_backend.as_deref());
    if a.json {
        let (list, error) = match &adapters {
            Ok(l) => (l.clone(), None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let v = serde_json::json!({ "cpu": cpu.to_string(), "wgpu": list, "wgpu_error": error });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("cpu: {cpu}");
    if cfg!(feature = "cuda") {
        println!("cuda[:N]: built in (the NVIDIA driver numbers the GPUs)");
    }
    match adapters {
        Ok(list) if list.is_empty() => println!("wgpu: no adapter with compute shaders found"),
        Ok(list) => list.iter().for_each(|a| println!("{a}")),
        Err(e) => println!("wgpu: {e}"),
    }
    Ok(())
}
