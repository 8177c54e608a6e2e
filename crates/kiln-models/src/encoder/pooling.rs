//! How an encoder's token rows become one vector: the model's own pooling
//! configuration (sentence-transformers' `modules.json` and its pooling
//! module's `config.json`, or GGUF's `{arch}.pooling_type`).

use std::path::Path;

use serde::Deserialize;

use crate::error::{ModelError, Result};

/// Which rows make the vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of every token's row.
    Mean,
    /// The first token's row (`[CLS]`).
    Cls,
    /// The last token's row (decoder embedders).
    Last,
}

impl Pooling {
    /// The name used in docs and `/api/show`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
        }
    }
}

/// What the model's configuration says about its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolingConfig {
    /// Pooling.
    pub pooling: Pooling,
    /// Scale each vector to unit length.
    pub normalize: bool,
    /// The model is a cross-encoder: a classification head scores a
    /// (query, document) pair from the `[CLS]` row (rerankers).
    pub rank: bool,
}

impl Default for PoolingConfig {
    fn default() -> Self {
        Self { pooling: Pooling::Mean, normalize: true, rank: false }
    }
}

#[derive(Deserialize)]
struct StModule {
    #[serde(default)]
    path: String,
    #[serde(rename = "type", default)]
    ty: String,
}

#[derive(Deserialize, Default)]
struct StPooling {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
}

impl PoolingConfig {
    /// Reads a Hugging Face directory's sentence-transformers files; a
    /// directory without them pools by the mean and normalizes (what
    /// sentence-transformers does for a bare checkpoint, plus the unit
    /// length every embeddings API returns).
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|e| ModelError::Io { path: p.to_path_buf(), source: e });
        let bad = |p: &Path, m: String| ModelError::Format { path: p.to_path_buf(), msg: m };
        let modules_path = dir.join("modules.json");
        if !modules_path.is_file() {
            return Ok(Self::default());
        }
        let modules: Vec<StModule> =
            serde_json::from_str(&read(&modules_path)?).map_err(|e| bad(&modules_path, e.to_string()))?;
        let mut cfg = Self { pooling: Pooling::Mean, normalize: false, rank: false };
        for m in &modules {
            let kind = m.ty.rsplit('.').next().unwrap_or_default();
            match kind {
                "Transformer" => {}
                "Normalize" => cfg.normalize = true,
                "Pooling" => {
                    if m.path.contains("..") || Path::new(&m.path).is_absolute() {
                        return Err(bad(&modules_path, format!("module path '{}' leaves the directory", m.path)));
                    }
                    let p = dir.join(&m.path).join("config.json");
                    let st: StPooling = serde_json::from_str(&read(&p)?).map_err(|e| bad(&p, e.to_string()))?;
                    cfg.pooling = st.pooling().map_err(|m| bad(&p, m))?;
                }
                // Dense projections and other heads change the vector: refuse
                // rather than return something the model's users never see.
                other => {
                    return Err(bad(&modules_path, format!("sentence-transformers module '{other}' is not supported")))
                }
            }
        }
        Ok(cfg)
    }

    /// GGUF's `pooling_type` (llama.cpp's numbering: 0 none, 1 mean, 2 cls,
    /// 3 last, 4 rank); absent, mean.
    pub fn from_gguf(pooling_type: Option<u32>) -> Result<Self> {
        let (pooling, rank) = match pooling_type.unwrap_or(1) {
            1 => (Pooling::Mean, false),
            2 => (Pooling::Cls, false),
            3 => (Pooling::Last, false),
            4 => (Pooling::Cls, true),
            0 => return Err(ModelError::Config("pooling_type 0 (per-token vectors) is not supported".into())),
            t => return Err(ModelError::Config(format!("unknown pooling_type {t}"))),
        };
        Ok(Self { pooling, normalize: !rank, rank })
    }

    /// Pools `rows` (`n × dim`, one input's token rows) into `out`.
    pub fn pool(&self, rows: &[f32], dim: usize, out: &mut Vec<f32>) {
        out.clear();
        let n = rows.len().checked_div(dim).unwrap_or(0);
        if n == 0 {
            out.resize(dim, 0.0);
            return;
        }
        match self.pooling {
            Pooling::Cls => out.extend_from_slice(&rows[..dim]),
            Pooling::Last => out.extend_from_slice(&rows[(n - 1) * dim..n * dim]),
            Pooling::Mean => {
                out.resize(dim, 0.0);
                for r in rows.chunks_exact(dim) {
                    out.iter_mut().zip(r).for_each(|(o, v)| *o += v);
                }
                let inv = 1.0 / n as f32;
                out.iter_mut().for_each(|o| *o *= inv);
            }
        }
        if self.normalize {
            normalize(out);
        }
    }
}

impl StPooling {
    fn pooling(&self) -> std::result::Result<Pooling, String> {
        let modes = [
            (self.pooling_mode_mean_tokens, Some(Pooling::Mean), "mean"),
            (self.pooling_mode_cls_token, Some(Pooling::Cls), "cls"),
            (self.pooling_mode_lasttoken, Some(Pooling::Last), "lasttoken"),
            (self.pooling_mode_max_tokens, None, "max"),
            (self.pooling_mode_mean_sqrt_len_tokens, None, "mean_sqrt_len"),
            (self.pooling_mode_weightedmean_tokens, None, "weightedmean"),
        ];
        let on: Vec<_> = modes.iter().filter(|m| m.0).collect();
        match on.as_slice() {
            [(_, Some(p), _)] => Ok(*p),
            [(_, None, name)] => Err(format!("pooling mode '{name}' is not supported")),
            [] => Err("no pooling mode is set".into()),
            _ => Err("several pooling modes at once (concatenated vectors) are not supported".into()),
        }
    }
}

/// Scales `v` to unit Euclidean length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        let inv = (1.0 / norm) as f32;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_mean_cls_last_and_normalizes() {
        let rows = [1.0, 0.0, 3.0, 4.0];
        let mut out = Vec::new();
        let raw = |pooling| PoolingConfig { pooling, normalize: false, rank: false };
        raw(Pooling::Mean).pool(&rows, 2, &mut out);
        assert_eq!(out, [2.0, 2.0]);
        raw(Pooling::Cls).pool(&rows, 2, &mut out);
        assert_eq!(out, [1.0, 0.0]);
        raw(Pooling::Last).pool(&rows, 2, &mut out);
        assert_eq!(out, [3.0, 4.0]);
        PoolingConfig { pooling: Pooling::Last, normalize: true, rank: false }.pool(&rows, 2, &mut out);
        assert_eq!(out, [0.6, 0.8]);
    }

    #[test]
    fn reads_sentence_transformers_files() {
        let dir = std::env::temp_dir().join(format!("kiln-pool-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        std::fs::write(
            dir.join("modules.json"),
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
               {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
               {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        )
        .unwrap();
        std::fs::write(dir.join("1_Pooling/config.json"), r#"{"pooling_mode_cls_token":true}"#).unwrap();
        let c = PoolingConfig::from_hf_dir(&dir).unwrap();
        assert_eq!((c.pooling, c.normalize), (Pooling::Cls, true));
        std::fs::write(dir.join("1_Pooling/config.json"), r#"{"pooling_mode_max_tokens":true}"#).unwrap();
        assert!(PoolingConfig::from_hf_dir(&dir).unwrap_err().to_string().contains("'max'"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_gguf_pooling_types() {
        assert_eq!(PoolingConfig::from_gguf(None).unwrap().pooling, Pooling::Mean);
        assert!(PoolingConfig::from_gguf(Some(4)).unwrap().rank);
        assert!(PoolingConfig::from_gguf(Some(0)).is_err());
        assert!(PoolingConfig::from_gguf(Some(9)).is_err());
    }
}
