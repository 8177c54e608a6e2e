//! The mixture-of-experts feed-forward block, as Qwen3-MoE and Mixtral
//! (and the llama file's other variants) use it in place of the dense
//! gated unit: a router picks `top_k` of the layer's experts for each token
//! and weighs them by its softmax, renormalized over the picked ones; each
//! expert is a SwiGLU unit. The expert weights stay in their file format,
//! stacked as the GGUF 3-D tensors `ffn_{gate,up,down}_exps` hold them;
//! [`Backend::moe`] groups the tokens by expert.
//!
//! gpt-oss's form ([`MoeFfn::load`] with `biased`): the router and every
//! expert's gate, up and down products have biases, the router's softmax
//! runs over the picked logits alone (the renormalized softmax above), and
//! the experts' unit is the clamped SwiGLU ([`Glu::SwigluOai`]).
//!
//! Papers: Outrageously Large Neural Networks (Shazeer et al., 2017,
//! arXiv:1701.06538); Mixtral of Experts (Jiang et al., 2024,
//! arXiv:2401.04088); Qwen3 Technical Report (2025, arXiv:2505.09388).
//! References: Hugging Face `modeling_mixtral.py`, `modeling_qwen3_moe.py`.

use kiln_backend::{Backend, Feature, Glu, MatrixDesc, MatrixUse, Moe, Routing};

use crate::config::{ModelConfig, MoeConfig};
use crate::error::{ModelError, Result};
use crate::loader::TensorSource;
use crate::weights::{expert_weight, host_weight, rows_f32, vector_f32};

/// One layer's experts and router.
pub(crate) struct MoeFfn<B: Backend> {
    router: B::Matrix,
    gate_up: B::Matrix,
    down: B::Matrix,
    cfg: MoeConfig,
    act: Glu,
}

/// Refuses a backend without [`Backend::moe`] before any weight is placed.
pub(crate) fn check_backend<B: Backend>(be: &B) -> Result<()> {
    if be.supports(Feature::Moe) {
        Ok(())
    } else {
        Err(ModelError::Config(format!(
            "mixture-of-experts models need Feature::Moe, which the {} backend does not implement yet",
            be.name()
        )))
    }
}

impl<B: Backend> MoeFfn<B> {
    /// Places layer `layer`'s router and experts from `src` (GGUF names);
    /// `biased`: gpt-oss's form (biases, the clamped SwiGLU).
    pub(crate) fn load(
        be: &mut B,
        cfg: &ModelConfig,
        m: MoeConfig,
        src: &dyn TensorSource,
        layer: usize,
        biased: bool,
    ) -> Result<Self> {
        let (d, e, ff) = (cfg.hidden_size, m.experts, m.expert_ff);
        let p = |s: &str| format!("blk.{layer}.{s}");
        let exp = |name: &str, rows, cols| expert_weight(&p(name), src.require(&p(name))?, e, rows, cols);
        // Each expert's bias (`[experts, rows]`), stacked as the weights are.
        let bias = |names: &[(&str, usize)]| -> Result<Option<Vec<f32>>> {
            if !biased {
                return Ok(None);
            }
            let mut b = Vec::new();
            for &(name, rows) in names {
                b.extend(rows_f32(&p(name), &src.require(&p(name))?, e, rows)?);
            }
            Ok(Some(b))
        };
        let router = MatrixDesc {
            parts: vec![host_weight(&p("ffn_gate_inp.weight"), src.require(&p("ffn_gate_inp.weight"))?, e, d)?],
            bias: match biased {
                true => Some(vector_f32(&p("ffn_gate_inp.bias"), &src.require(&p("ffn_gate_inp.bias"))?, e)?),
                false => None,
            },
            usage: MatrixUse::Linear,
        };
        let gate_up = MatrixDesc {
            parts: vec![exp("ffn_gate_exps.weight", ff, d)?, exp("ffn_up_exps.weight", ff, d)?],
            bias: bias(&[("ffn_gate_exps.bias", ff), ("ffn_up_exps.bias", ff)])?,
            usage: MatrixUse::Experts { count: e },
        };
        let down = MatrixDesc {
            parts: vec![exp("ffn_down_exps.weight", d, ff)?],
            bias: bias(&[("ffn_down_exps.bias", d)])?,
            usage: MatrixUse::Experts { count: e },
        };
        Ok(Self {
            router: be.matrix(router)?,
            gate_up: be.matrix(gate_up)?,
            down: be.matrix(down)?,
            cfg: m,
            act: if biased { Glu::SwigluOai } else { Glu::Swiglu },
        })
    }

    /// `x += moe(rmsnorm(x))`.
    pub(crate) fn forward(
        &self,
        be: &mut B,
        step: &B::Step,
        x: &mut B::Buffer,
        norm: &B::Vector,
        eps: f32,
    ) -> Result<()> {
        let block = Moe {
            norm,
            eps,
            router: &self.router,
            gate_up: &self.gate_up,
            down: &self.down,
            experts: self.cfg.experts,
            top_k: self.cfg.top_k,
            routing: Routing::SoftmaxTopK { renormalize: self.cfg.norm_topk },
            act: self.act,
        };
        Ok(be.moe(step, x, &block)?)
    }

    /// Bytes one token reads: the router and `top_k` experts' share of
    /// the expert matrices.
    pub(crate) fn bytes_per_token(&self, be: &B) -> usize {
        let experts = be.matrix_bytes(&self.gate_up) + be.matrix_bytes(&self.down);
        be.matrix_bytes(&self.router) + experts / self.cfg.experts * self.cfg.top_k
    }
}
