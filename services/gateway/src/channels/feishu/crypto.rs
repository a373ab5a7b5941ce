//! Encrypted event callbacks: with an Encrypt Key set, Feishu posts `{"encrypt": base64}` where
//! the decoded bytes are a 16-byte IV followed by AES-256-CBC ciphertext (PKCS#7 padding) under
//! the key SHA-256(encryptKey), and signs each request: `X-Lark-Signature` is the hex SHA-256 of
//! `timestamp + nonce + encryptKey + body`.

use aes::cipher::{BlockDecryptMut as _, KeyIvInit as _, block_padding::Pkcs7};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

type Decryptor = cbc::Decryptor<aes::Aes256>;

/// Why an encrypted body could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum CryptoError {
    /// Not base64.
    #[error("the encrypt field is not base64")]
    Base64,
    /// Shorter than an IV and one block, or not whole blocks.
    #[error("the encrypted payload is too short or not whole blocks")]
    Length,
    /// Wrong key or damaged ciphertext (the padding does not check).
    #[error("the payload does not decrypt with encryptKey")]
    Padding,
    /// Decrypted, but not UTF-8.
    #[error("the decrypted payload is not UTF-8")]
    Utf8,
}

/// Decrypts the `encrypt` field of a callback with `encrypt_key`.
pub(super) fn decrypt(encrypt_key: &str, encrypted: &str) -> Result<String, CryptoError> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encrypted.trim())
        .map_err(|_| CryptoError::Base64)?;
    if raw.len() < 32 || !raw.len().is_multiple_of(16) {
        return Err(CryptoError::Length);
    }
    let (iv, body) = raw.split_at(16);
    let key = Sha256::digest(encrypt_key.as_bytes());
    let mut buf = body.to_vec();
    let plain = Decryptor::new(key.as_slice().into(), iv.into())
        .decrypt_padded_mut::<Pkcs7>(&mut buf)
        .map_err(|_| CryptoError::Padding)?;
    String::from_utf8(plain.to_vec()).map_err(|_| CryptoError::Utf8)
}

/// Returns whether `signature` is Feishu's signature of this request under `encrypt_key`.
pub(super) fn signed(
    encrypt_key: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
    signature: &str,
) -> bool {
    let mut hash = Sha256::new();
    hash.update(timestamp.as_bytes());
    hash.update(nonce.as_bytes());
    hash.update(encrypt_key.as_bytes());
    hash.update(body);
    let want = hex::encode(hash.finalize());
    // Both are hex of a hash: comparing every byte keeps the time independent of the input.
    let given = signature.trim().to_ascii_lowercase();
    want.len() == given.len()
        && want
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use aes::cipher::BlockEncryptMut as _;

    use super::*;

    fn encrypt(key: &str, iv: [u8; 16], plain: &str) -> String {
        let key = Sha256::digest(key.as_bytes());
        let mut buf = vec![0u8; plain.len() + 16];
        buf[..plain.len()].copy_from_slice(plain.as_bytes());
        let ct = cbc::Encryptor::<aes::Aes256>::new(key.as_slice().into(), (&iv).into())
            .encrypt_padded_mut::<Pkcs7>(&mut buf, plain.len())
            .unwrap()
            .to_vec();
        let mut out = iv.to_vec();
        out.extend(ct);
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    #[test]
    fn feishus_documented_sample_decrypts() {
        // The example of Feishu's event subscription guide: key "test key", plaintext "hello world".
        assert_eq!(
            decrypt("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="),
            Ok("hello world".to_string())
        );
    }

    #[test]
    fn a_cjk_event_round_trips_and_bad_input_is_a_clear_error() {
        let event = r#"{"event":{"message":{"content":"{\"text\":\"你好 👋🏽\"}"}}}"#;
        let sealed = encrypt("密钥 key", [7; 16], event);
        assert_eq!(decrypt("密钥 key", &sealed).as_deref(), Ok(event));
        assert_ne!(decrypt("other", &sealed).as_deref(), Ok(event));
        assert_eq!(decrypt("k", "not base64!"), Err(CryptoError::Base64));
        assert_eq!(decrypt("k", "AAAA"), Err(CryptoError::Length));
    }

    #[test]
    fn only_the_signature_of_this_body_under_the_key_passes() {
        let body = br#"{"encrypt":"x"}"#;
        let mut h = Sha256::new();
        h.update(b"1700000000nonce-1key");
        h.update(body);
        let sig = hex::encode(h.finalize());
        assert!(signed("key", "1700000000", "nonce-1", body, &sig));
        assert!(!signed("key2", "1700000000", "nonce-1", body, &sig));
        assert!(!signed("key", "1700000001", "nonce-1", body, &sig));
        assert!(!signed("key", "1700000000", "nonce-1", b"{}", &sig));
        assert!(!signed("key", "1700000000", "nonce-1", body, ""));
    }
}
