//! [`GgufTokenizerSpec`]: the tokenizer keys of a GGUF file, as plain data.

/// GGUF `tokenizer.ggml.token_type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// An ordinary vocabulary entry (1; also used when the type is absent or unknown).
    Normal,
    /// The unknown token (2).
    Unknown,
    /// A control token such as BOS, EOS or `<|im_start|>` (3).
    Control,
    /// A user-defined token, matched literally in text (4).
    UserDefined,
    /// A reserved, unused entry (5).
    Unused,
    /// A byte-fallback token such as `<0x41>` (6).
    Byte,
}

impl TokenType {
    /// Maps a GGUF token type number; unknown numbers count as [`TokenType::Normal`].
    pub fn from_gguf(v: i32) -> Self {
        match v {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }
}

/// The tokenizer description stored in a GGUF file, one field per `tokenizer.*` key.
///
/// Build it from any GGUF reader (or by hand in tests) and pass it to
/// [`crate::Tokenizer::from_gguf_spec`]. Absent keys are `None`/empty; the defaults
/// of the tokenizer type apply then.
#[derive(Debug, Clone, Default)]
pub struct GgufTokenizerSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE), `"llama"` (SentencePiece BPE),
    /// `"bert"` (WordPiece), `"t5"` (SentencePiece Unigram), ...
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer family (BPE only).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` (raw GGUF numbers).
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores` (SentencePiece merge priorities).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.merges`: `"left right"` pairs, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_token_id: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom_token_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown_token_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub padding_token_id: Option<u32>,
    /// `tokenizer.ggml.seperator_token_id` (GGUF's spelling): BERT's `[SEP]`.
    pub sep_token_id: Option<u32>,
    /// `tokenizer.ggml.cls_token_id`: BERT's `[CLS]`.
    pub cls_token_id: Option<u32>,
    /// `tokenizer.ggml.add_sep_token`: WordPiece appends `[SEP]` (default true).
    pub add_sep_token: Option<bool>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos_token: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos_token: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces`.
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.precompiled_charsmap`: SentencePiece's normalization
    /// map (Unigram `t5` vocabularies).
    pub precompiled_charsmap: Vec<u8>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    /// `general.name`: a few models need per-model token attributes (Phi-3).
    pub model_name: Option<String>,
}

impl GgufTokenizerSpec {
    /// The type of token `id` (normal when the file gives none).
    pub fn token_type(&self, id: usize) -> TokenType {
        self.token_types.get(id).map_or(TokenType::Normal, |t| TokenType::from_gguf(*t))
    }
}
