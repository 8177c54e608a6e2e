//! Pre-tokenizers: the regular expressions that cut text into words before BPE.
//!
//! A family (the GGUF `tokenizer.ggml.pre` value) names a list of expressions that
//! are applied in order; each one splits every piece produced so far into its matches
//! *and* the text between matches, so no byte is ever dropped. The expressions are
//! the published ones of each model family (as tabulated by llama.cpp's vocabulary
//! loader); the matching engine is `fancy-regex` because several use look-ahead.

use crate::error::{Result, TokenizeError};
use fancy_regex::Regex;

const CONTRACTIONS: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3_TAIL: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_TAIL: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_TAIL: &str =
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER_TAIL: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const MINICPM5_TAIL: &str = r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CASED_WORDS: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+CONTR|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*CONTR";
const GPT4O_TAIL: &str = r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_TAIL: &str = r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEEPSEEK_LATIN: &str = "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+";
const DEEPSEEK_PUNCT: &str = "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+";
const CJK: &str = "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+";
const DEEPSEEK3_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
const PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// Family-specific switches that come with a pre-tokenizer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FamilyFlags {
    /// Words found whole in the vocabulary skip the merges (Llama 3 and others).
    pub(crate) ignore_merges: bool,
    /// The family adds BOS by default (overridden by `add_bos_token`).
    pub(crate) add_bos: bool,
    /// Pieces are GPT-2 byte-level encoded before merging (false: raw UTF-8 with `▁`).
    pub(crate) byte_encode: bool,
    /// Spaces are replaced by `▁` before splitting (SentencePiece-style BPE).
    pub(crate) escape_whitespace: bool,
}

/// A compiled list of splitting expressions.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    regexes: Vec<Regex>,
}

fn cased_words() -> String {
    CASED_WORDS.replace("CONTR", &format!("{CONTRACTIONS}?"))
}

/// Returns the expressions of a family and its flags, or `None` if unknown.
fn family(pre: &str) -> Option<(Vec<String>, FamilyFlags)> {
    let mut flags = FamilyFlags { byte_encode: true, ..FamilyFlags::default() };
    let s = |x: &str| x.to_string();
    let llama3 = format!("{CONTRACTIONS}{LLAMA3_TAIL}");
    let exprs = match pre {
        "default" => vec![s(r"[\p{P}\$\+<=>\^~\|]+"), s(GPT2), s(r"\p{N}+"), s("[0-9][0-9][0-9]")],
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" => {
            flags.ignore_merges = true;
            flags.add_bos = true;
            vec![llama3]
        }
        "dbrx" | "smaug-bpe" => vec![llama3],
        "chatglm-bpe" => vec![llama3],
        "glm4" | "glm5" => {
            flags.ignore_merges = true;
            vec![llama3]
        }
        "deepseek-llm" => vec![s(r"[\r\n]"), s(DEEPSEEK_LATIN), s(DEEPSEEK_PUNCT), s(r"\s+$"), s(CJK), s(r"\p{N}+")],
        "deepseek-coder" => vec![s(r"[\r\n]"), s(r"\s?\p{L}+"), s(r"\s?\p{P}+"), s(CJK), s(r"\p{N}")],
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => {
            vec![s(r"\p{N}{1,3}"), s("[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+"), s(DEEPSEEK3_WORDS)]
        }
        "falcon" => vec![s(r"[\p{P}\$\+<=>\^~\|`]+"), s(GPT2), s("[0-9][0-9][0-9]")],
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            vec![s(r"\p{N}"), s(GPT2)]
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0" | "mellum"
        | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo" | "jais" | "trillion"
        | "granite-docling" | "exaone4" => vec![s(GPT2)],
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan" | "solar-open" | "megrez"
        | "ufakzeka" | "grok-2" | "laguna" => {
            vec![format!("{CONTRACTIONS}{QWEN2_TAIL}")]
        }
        "qwen35" => vec![format!("{CONTRACTIONS}{QWEN35_TAIL}")],
        "seed-coder" => vec![format!("{CONTRACTIONS}{SEED_CODER_TAIL}")],
        "minicpm5" => {
            flags.ignore_merges = true;
            vec![s(r"\p{N}{1,3}"), format!("{CONTRACTIONS}{MINICPM5_TAIL}")]
        }
        "bailingmoe" | "bailingmoe2" | "llada-moe" => vec![s(
            r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        )],
        "poro-chat" | "bloom" | "gpt3-finnish" => vec![s(PORO)],
        "viking" => vec![s(PORO), s(r"\p{N}")],
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
            vec![format!("{}{GPT4O_TAIL}", cased_words())]
        }
        "tekken" => {
            flags.ignore_merges = true;
            flags.add_bos = true;
            let w = cased_words().replace(&format!("{CONTRACTIONS}?"), "");
            vec![format!("{w}{TEKKEN_TAIL}")]
        }
        "gemma4" => {
            flags.byte_encode = false;
            flags.escape_whitespace = true;
            vec![s(r"[^\n]+|[\n]+")]
        }
        _ => return None,
    };
    Some((exprs, flags))
}

/// Whether `pre` names a family this crate implements.
pub(crate) fn is_known_family(pre: &str) -> bool {
    family(pre).is_some()
}

impl PreTokenizer {
    /// Builds the pre-tokenizer of a family (`tokenizer.ggml.pre`).
    pub(crate) fn for_family(pre: &str) -> Result<(Self, FamilyFlags)> {
        let (exprs, flags) =
            family(pre).ok_or_else(|| TokenizeError::Unsupported(format!("pre-tokenizer family {pre:?}")))?;
        let regexes = exprs
            .iter()
            .map(|e| Regex::new(e).map_err(|err| TokenizeError::Invalid(format!("regex {e:?}: {err}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok((Self { regexes }, flags))
    }

    /// Splits `text` into words; concatenating the words gives back `text`.
    pub(crate) fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>> {
        let mut pieces = vec![text];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                split_one(re, piece, &mut next)?;
            }
            pieces = next;
        }
        Ok(pieces)
    }
}

/// Appends the matches of `re` in `piece` and the gaps between them.
fn split_one<'t>(re: &Regex, piece: &'t str, out: &mut Vec<&'t str>) -> Result<()> {
    let mut last = 0;
    for m in re.find_iter(piece) {
        let m = m.map_err(|e| TokenizeError::Encode(format!("pre-tokenizer: {e}")))?;
        if m.start() > last {
            out.push(&piece[last..m.start()]);
        }
        if m.end() > m.start() {
            out.push(m.as_str());
        }
        last = m.end();
    }
    if last < piece.len() {
        out.push(&piece[last..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let (p, _) = PreTokenizer::for_family(pre).unwrap();
        p.split(text).unwrap().into_iter().map(String::from).collect()
    }

    #[test]
    fn gpt2_keeps_space_before_words_and_trailing_spaces_apart() {
        assert_eq!(split("gpt-2", "Hello world  x"), ["Hello", " world", " ", " x"]);
        assert_eq!(split("gpt-2", "it's 123"), ["it", "'s", " 123"]);
    }

    #[test]
    fn smollm_splits_digits_one_by_one() {
        assert_eq!(split("smollm", "a 123"), ["a", " ", "1", "2", "3"]);
    }

    #[test]
    fn llama3_groups_three_digits_and_newlines() {
        assert_eq!(split("llama-bpe", "12345\n\nHi"), ["123", "45", "\n\n", "Hi"]);
    }

    #[test]
    fn every_family_compiles_and_loses_nothing() {
        for pre in [
            "default",
            "llama-bpe",
            "dbrx",
            "deepseek-llm",
            "deepseek-coder",
            "deepseek-v3",
            "falcon",
            "smollm",
            "gpt-2",
            "qwen2",
            "qwen35",
            "seed-coder",
            "minicpm5",
            "bailingmoe",
            "poro-chat",
            "viking",
            "gpt-4o",
            "tekken",
            "gemma4",
            "chatglm-bpe",
        ] {
            let text = "Hello, World! It's 2024\n\n  ünïcödé 你好 🦙 x";
            assert_eq!(split(pre, text).concat(), text, "{pre}");
        }
        assert!(PreTokenizer::for_family("no-such-family").is_err());
    }
}
