//! Naming a model's quantization for `kiln list`.
//!
//! For GGUF the file says it: `general.file_type` (llama.cpp's file type
//! enum), else the type holding the most weight bytes. If the file cannot
//! be read, the name is guessed from the file name (`...Q4_K_M.gguf`). For
//! safetensors directories it is `config.json`'s `torch_dtype`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use kiln_gguf::GgufFile;

/// llama.cpp's `general.file_type` values and their names.
const FILE_TYPES: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4"),
];

/// Quantization names recognised in file names, longest first so that
/// `Q4_K_M` wins over `Q4_K`.
const NAME_PATTERNS: &[&str] = &[
    "IQ2_XXS", "IQ3_XXS", "IQ2_XS", "IQ3_XS", "IQ4_XS", "IQ4_NL", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
    "Q5_K_S", "Q5_K_M", "Q2_K_S", "IQ1_S", "IQ1_M", "IQ2_S", "IQ2_M", "IQ3_S", "IQ3_M", "TQ1_0", "TQ2_0", "MXFP4",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16", "F32",
];

/// The quantization of a GGUF file.
pub(crate) fn of_gguf(path: &Path) -> Option<String> {
    match GgufFile::open(path) {
        Ok(file) => from_gguf(&file).or_else(|| from_file_name(path)),
        Err(_) => from_file_name(path),
    }
}

fn from_gguf(file: &GgufFile) -> Option<String> {
    if let Ok(Some(id)) = file.metadata().opt_u32("general.file_type") {
        // Bit 10 marks "guessed" file types in llama.cpp; ignore it.
        let id = id & !1024;
        if let Some((_, name)) = FILE_TYPES.iter().find(|(i, _)| *i == id) {
            return Some((*name).to_string());
        }
    }
    let mut bytes_by_type: HashMap<&'static str, usize> = HashMap::new();
    for t in file.tensors() {
        *bytes_by_type.entry(t.ty.name()).or_default() += t.n_bytes();
    }
    bytes_by_type.into_iter().max_by_key(|(name, bytes)| (*bytes, *name)).map(|(name, _)| name.to_string())
}

/// Guesses the quantization from a name like `model.Q4_K_M.gguf`.
pub(crate) fn from_file_name(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_string_lossy().to_ascii_uppercase();
    let bytes = stem.as_bytes();
    let delimiter =
        |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_none_or(|b| !b.is_ascii_alphanumeric() && *b != b'_');
    NAME_PATTERNS.iter().find_map(|pat| {
        stem.match_indices(pat).find_map(|(at, _)| {
            let before = at.checked_sub(1);
            let after = Some(at + pat.len());
            let ok = (at == 0 || delimiter(before)) && delimiter(after);
            ok.then(|| (*pat).to_string())
        })
    })
}

/// The dtype of a safetensors model directory, from `config.json`.
pub(crate) fn of_hf_dir(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join("config.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let dtype = json.get("torch_dtype").or_else(|| json.get("dtype"))?.as_str()?;
    Some(
        match dtype {
            "bfloat16" => "BF16",
            "float16" => "F16",
            "float32" => "F32",
            other => other,
        }
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_gguf::{GgmlType, GgufWriter};

    #[test]
    fn names_from_file_names() {
        let q = |s: &str| from_file_name(Path::new(s));
        assert_eq!(q("SmolLM2-135M-Instruct.Q4_1.gguf").as_deref(), Some("Q4_1"));
        assert_eq!(q("llama-3-8b-instruct-q4_k_m.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(q("model.Q4_K.gguf").as_deref(), Some("Q4_K"));
        assert_eq!(q("m-IQ2_XXS.gguf").as_deref(), Some("IQ2_XXS"));
        assert_eq!(q("model-f16.gguf").as_deref(), Some("F16"));
        assert_eq!(q("BF16.gguf").as_deref(), Some("BF16"));
        assert_eq!(q("model.gguf"), None);
        assert_eq!(q("xq4_0y.gguf"), None);
    }

    #[test]
    fn gguf_file_type_then_dominant_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = GgufWriter::new();
        w.add_metadata("general.file_type", 3u32).unwrap();
        w.add_f32_tensor("a", &[4], &[0.0; 4]).unwrap();
        let typed = dir.path().join("plain.gguf");
        w.write_to(&typed).unwrap();
        assert_eq!(of_gguf(&typed).as_deref(), Some("Q4_1"));

        let mut w = GgufWriter::new();
        w.add_f32_tensor("norm", &[32], &[0.0; 32]).unwrap();
        // One Q8_0 block row of 64 values: 2 blocks of 34 bytes.
        w.add_tensor("w", &[64, 4], GgmlType::Q8_0, vec![0u8; 34 * 2 * 4]).unwrap();
        let untyped = dir.path().join("x.F16.gguf");
        w.write_to(&untyped).unwrap();
        assert_eq!(of_gguf(&untyped).as_deref(), Some("Q8_0"));

        let broken = dir.path().join("broken.Q5_1.gguf");
        fs::write(&broken, b"GGUFjunk").unwrap();
        assert_eq!(of_gguf(&broken).as_deref(), Some("Q5_1"));
    }

    #[test]
    fn dtype_from_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(of_hf_dir(dir.path()), None);
        fs::write(dir.path().join("config.json"), br#"{"torch_dtype":"bfloat16"}"#).unwrap();
        assert_eq!(of_hf_dir(dir.path()).as_deref(), Some("BF16"));
    }
}
