//! The GPT-2 "byte-level" alphabet: every byte gets a printable Unicode character,
//! so byte-level BPE vocabularies can be stored as text.
//!
//! Printable Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) map to themselves; the
//! remaining 68 bytes map, in order, to U+0100, U+0101, ...

/// Byte → char table and its inverse.
#[derive(Debug, Clone)]
pub(crate) struct ByteLevel {
    to_char: [char; 256],
    /// Indexed by code point (all alphabet characters are below U+0144).
    from_char: [Option<u8>; 0x144],
}

fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

impl ByteLevel {
    pub(crate) fn new() -> Self {
        let mut to_char = ['\0'; 256];
        let mut from_char = [None; 0x144];
        let mut next = 0x100u32;
        for b in 0..=255u8 {
            let cp = if is_self_mapped(b) {
                u32::from(b)
            } else {
                next += 1;
                next - 1
            };
            to_char[usize::from(b)] = char::from_u32(cp).unwrap_or('\u{FFFD}');
            if let Some(slot) = from_char.get_mut(cp as usize) {
                *slot = Some(b);
            }
        }
        Self { to_char, from_char }
    }

    /// The character standing for byte `b`.
    pub(crate) fn char_of(&self, b: u8) -> char {
        self.to_char[usize::from(b)]
    }

    /// The byte a character stands for, if it is in the alphabet.
    pub(crate) fn byte_of(&self, c: char) -> Option<u8> {
        self.from_char.get(c as usize).copied().flatten()
    }

    /// Encodes raw bytes as byte-level text.
    pub(crate) fn encode(&self, bytes: &[u8]) -> String {
        bytes.iter().map(|b| self.char_of(*b)).collect()
    }

    /// Decodes byte-level text; `None` if a character is outside the alphabet.
    pub(crate) fn decode(&self, text: &str) -> Option<Vec<u8>> {
        text.chars().map(|c| self.byte_of(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let bl = ByteLevel::new();
        for b in 0..=255u8 {
            assert_eq!(bl.byte_of(bl.char_of(b)), Some(b), "byte {b}");
        }
        assert_eq!(bl.char_of(b' '), 'Ġ');
        assert_eq!(bl.char_of(b'\n'), 'Ċ');
        assert_eq!(bl.decode("ĠHello"), Some(b" Hello".to_vec()));
        assert_eq!(bl.decode("<|im_start|>"), Some(b"<|im_start|>".to_vec()));
        assert_eq!(bl.decode("\u{2581}"), None);
    }
}
