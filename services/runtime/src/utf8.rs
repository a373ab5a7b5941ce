//! Bytes that arrive in pieces, turned into text without cutting a character: a process's
//! output read 4 KiB at a time, an HTTP body chunk by chunk. Built on `encoding_rs`'s streaming
//! decoder; only truly invalid bytes become U+FFFD (Python's `errors="replace"`).

/// A streaming UTF-8 decoder: bytes in, whole characters out.
pub struct Utf8Decoder(encoding_rs::Decoder);

impl Default for Utf8Decoder {
    fn default() -> Self {
        Self(encoding_rs::UTF_8.new_decoder_without_bom_handling())
    }
}

impl std::fmt::Debug for Utf8Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Utf8Decoder")
    }
}

impl Utf8Decoder {
    /// Returns the characters `bytes` completes; a character cut at the end waits for the
    /// next call.
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        self.decode(bytes, false)
    }

    /// Returns what is left at the end of the input (U+FFFD for a cut-off character).
    pub fn finish(&mut self) -> String {
        self.decode(&[], true)
    }

    fn decode(&mut self, bytes: &[u8], last: bool) -> String {
        let room = self
            .0
            .max_utf8_buffer_length(bytes.len())
            .unwrap_or(bytes.len().saturating_mul(3).saturating_add(4));
        let mut out = String::with_capacity(room);
        let (_, _, _) = self.0.decode_to_string(bytes, &mut out, last);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Decoder;

    #[test]
    fn a_character_split_across_reads_waits_for_its_last_byte() {
        let mut utf8 = Utf8Decoder::default();
        let cat = "🐈".as_bytes();
        assert_eq!(utf8.feed(&cat[..1]), "");
        assert_eq!(utf8.feed(&cat[1..3]), "");
        assert_eq!(utf8.feed(&cat[3..]), "🐈");
    }

    #[test]
    fn an_invalid_byte_before_a_split_character_spoils_only_itself() {
        let mut utf8 = Utf8Decoder::default();
        assert_eq!(utf8.feed(b"a\xff\xe4\xbd"), "a\u{fffd}");
        assert_eq!(utf8.feed(b"\xa0"), "你");
    }
}
