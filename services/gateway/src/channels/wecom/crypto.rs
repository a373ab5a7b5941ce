//! Decrypting the images and files users send: WeCom serves them encrypted with AES-256-CBC,
//! the key being the message's base64 `aeskey` (32 bytes), the IV its first 16 bytes, padded
//! PKCS#7 to a 32-byte block.

use aes::cipher::{BlockDecryptMut as _, KeyIvInit as _, block_padding::NoPadding};
use base64::Engine as _;

type Decryptor = cbc::Decryptor<aes::Aes256>;

/// Returns the plain bytes of `data` encrypted with `aes_key`; an error says why (a bad key,
/// a length that is not whole blocks, bad padding), never the key.
pub(super) fn decrypt(data: &[u8], aes_key: &str) -> anyhow::Result<Vec<u8>> {
    let trimmed = aes_key.trim().trim_end_matches('=');
    let key = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .map_err(|_| anyhow::anyhow!("aeskey is not base64"))?;
    anyhow::ensure!(key.len() == 32, "aeskey is {} bytes, not 32", key.len());
    anyhow::ensure!(
        !data.is_empty() && data.len().is_multiple_of(16),
        "encrypted media of {} bytes is not whole AES blocks",
        data.len()
    );
    let mut buf = data.to_vec();
    let plain = Decryptor::new(key[..].into(), key[..16].into())
        .decrypt_padded_mut::<NoPadding>(&mut buf)
        .map_err(|_| anyhow::anyhow!("media does not decrypt"))?;
    let pad = usize::from(*plain.last().unwrap_or(&0));
    anyhow::ensure!(
        (1..=32).contains(&pad) && pad <= plain.len(),
        "media padding is invalid (wrong aeskey?)"
    );
    let (body, padding) = plain.split_at(plain.len() - pad);
    anyhow::ensure!(
        padding.iter().all(|&b| usize::from(b) == pad),
        "media padding is invalid (wrong aeskey?)"
    );
    Ok(body.to_vec())
}

#[cfg(test)]
mod tests {
    use aes::cipher::{BlockEncryptMut as _, KeyIvInit as _};

    use super::*;

    fn encrypt(plain: &[u8], key: &[u8; 32]) -> Vec<u8> {
        let pad = 32 - plain.len() % 32;
        let mut buf = plain.to_vec();
        buf.extend(std::iter::repeat_n(pad as u8, pad));
        let len = buf.len();
        cbc::Encryptor::<aes::Aes256>::new(key[..].into(), key[..16].into())
            .encrypt_padded_mut::<NoPadding>(&mut buf, len)
            .unwrap()
            .to_vec()
    }

    #[test]
    fn media_encrypted_with_the_aeskey_and_32_byte_padding_decrypts_whole() {
        let key = [7u8; 32];
        let b64 = base64::engine::general_purpose::STANDARD.encode(key);
        let plain = "报告 📄 第一季度".as_bytes();
        let data = encrypt(plain, &key);
        assert_eq!(decrypt(&data, &b64).unwrap(), plain);
        // WeCom's keys come without their trailing '='.
        assert_eq!(decrypt(&data, b64.trim_end_matches('=')).unwrap(), plain);
        let exact = [1u8; 64];
        assert_eq!(decrypt(&encrypt(&exact, &key), &b64).unwrap(), exact);
    }

    #[test]
    fn a_wrong_key_or_a_cut_file_is_a_clear_error_without_the_key() {
        let key = [7u8; 32];
        let data = encrypt(b"hello", &key);
        let other = base64::engine::general_purpose::STANDARD.encode([9u8; 32]);
        let e = decrypt(&data, &other).unwrap_err().to_string();
        assert!(e.contains("padding"), "{e}");
        assert!(!e.contains(&other));
        let b64 = base64::engine::general_purpose::STANDARD.encode(key);
        assert!(decrypt(&data[..20], &b64).is_err());
        assert!(decrypt(&data, "short").is_err());
        assert!(decrypt(&[], &b64).is_err());
    }
}
