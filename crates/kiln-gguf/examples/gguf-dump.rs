//! Prints a GGUF file's header: version, metadata (long arrays and strings
//! cut short) and tensor infos.
//!
//! ```text
//! cargo run -p kiln-gguf --example gguf-dump -- model.gguf [--all-tensors]
//! ```

use std::process::ExitCode;

use kiln_gguf::GgufFile;

const MAX_ITEMS: usize = 8;
const MAX_CHARS: usize = 120;
const TENSORS_SHOWN: usize = 40;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: gguf-dump FILE.gguf [--all-tensors]");
        return ExitCode::from(2);
    };
    let all = args.iter().any(|a| a == "--all-tensors");
    match GgufFile::open(path) {
        Ok(file) => {
            dump(&file, all);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dump(file: &GgufFile, all: bool) {
    let meta = file.metadata();
    println!(
        "GGUF v{}  {} bytes  alignment {}  data at {}",
        file.version(),
        file.file_size(),
        file.alignment(),
        file.data_offset()
    );
    println!("\n{} metadata entries:", meta.len());
    for (key, value) in meta.iter() {
        let ty = match value {
            kiln_gguf::Value::Array(a) => format!("{}[{}]", a.elem_type().name(), a.len()),
            v => v.value_type().name().to_string(),
        };
        println!("  {key:<40} {ty:<14} {}", value.preview(MAX_ITEMS, MAX_CHARS));
    }
    let tensors = file.tensors();
    let total: usize = tensors.iter().map(|t| t.n_bytes()).sum();
    println!("\n{} tensors, {} bytes of data:", tensors.len(), total);
    let shown = if all { tensors.len() } else { tensors.len().min(TENSORS_SHOWN) };
    for t in &tensors[..shown] {
        println!(
            "  {:<32} {:<6} dims {:<16} {:>10} bytes  offset {}",
            t.name,
            t.ty.name(),
            format!("{:?}", t.dims),
            t.n_bytes(),
            t.offset
        );
    }
    if shown < tensors.len() {
        println!("  ... {} more (--all-tensors to list them)", tensors.len() - shown);
    }
}
