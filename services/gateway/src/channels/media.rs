//! Attachments every channel saves into `<workspace>/.nanobot/media/<channel>/`.
//!
//! **Names.** A platform's file id or file name is never a path: [`stored_name`] builds the
//! stored name from the id when it is made of `[A-Za-z0-9_-]` (at most 64), else from a hash
//! of it (`h` and 32 hex digits), followed by the file name reduced to letters and digits of
//! any script, `.`, `-` and `_` (anything else becomes `_`, no leading dot, at most 96 bytes
//! keeping the extension). [`path_in`] joins it and refuses anything that is not one
//! plain name inside the folder.
//!
//! **Caps.** [`Budget`] bounds one message's attachments by count and total bytes
//! (`channels.maxAttachments`, default 10, and `channels.maxAttachmentBytes`, default 25 MB):
//! an attachment past either is not downloaded (or, for mail, not written) and the turn says
//! so (`[file: name - skipped: …]`), so a message with many large files cannot fill the
//! agent's memory or the model request.

use std::path::{Component, Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// Longest platform id used as it is.
const MAX_ID: usize = 64;
/// Longest stored file-name part, in bytes.
const MAX_NAME: usize = 96;

/// Returns the platform id `id` as a file-name part: itself when it is 1..=64 characters of
/// `[A-Za-z0-9_-]`, else `h` and the first 32 hex digits of its SHA-256.
pub(crate) fn safe_id(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        return id.to_string();
    }
    let digest = hex::encode(Sha256::digest(id.as_bytes()));
    format!("h{}", &digest[..32])
}

/// Returns a platform file name reduced to a safe one: letters and digits of any script, `.`,
/// `-` and `_` kept, anything else (spaces too) `_`; no leading dot; at most 96 bytes, the
/// extension kept; `file` when nothing is left.
pub(crate) fn safe_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(
            |c| match c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                true => c,
                false => '_',
            },
        )
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        return "file".into();
    }
    if cleaned.len() <= MAX_NAME {
        return cleaned.to_string();
    }
    let (stem, ext) = match cleaned.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && ext.len() <= 16 => (stem, ext),
        _ => (cleaned, ""),
    };
    let room = MAX_NAME - ext.len() - usize::from(!ext.is_empty());
    let mut end = room.min(stem.len());
    while !stem.is_char_boundary(end) {
        end -= 1;
    }
    match ext.is_empty() {
        true => stem[..end].to_string(),
        false => format!("{}.{ext}", &stem[..end]),
    }
}

/// Returns the stored name of an attachment: `{id}_{name}` (see [`safe_id`], [`safe_name`]).
pub(crate) fn stored_name(id: &str, name: &str) -> String {
    format!("{}_{}", safe_id(id), safe_name(name))
}

/// Returns `dir/name`, refusing a `name` that is not one plain file name.
pub(crate) fn path_in(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let mut components = Path::new(name).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) if !name.contains('\0') => Ok(dir.join(name)),
        _ => anyhow::bail!("refused media file name {name:?}: not a plain name"),
    }
}

/// The per-message attachment caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Most attachments of one message.
    pub max_count: usize,
    /// Most bytes of one message's attachments together.
    pub max_bytes: u64,
}

impl Caps {
    /// Returns the caps of `channels.maxAttachments` / `channels.maxAttachmentBytes`.
    pub(crate) fn from_config(cfg: &nanobot_runtime::config::Config) -> Self {
        Self {
            max_count: cfg.channels.max_attachments,
            max_bytes: cfg.channels.max_attachment_bytes,
        }
    }
}

/// What is left of one message's attachment caps.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    caps: Caps,
    count: usize,
    bytes: u64,
}

impl Budget {
    /// Returns the full budget of one message.
    pub(crate) fn new(caps: Caps) -> Self {
        Self {
            caps,
            count: 0,
            bytes: 0,
        }
    }

    /// Takes room for one attachment of `size` bytes (as announced; 0 when unknown, then
    /// [`Budget::settle`] it once its real size is known). `Err` is the reason to tell.
    pub(crate) fn take(&mut self, size: u64) -> Result<(), String> {
        if self.count >= self.caps.max_count {
            return Err(format!(
                "skipped: more than {} attachments in one message",
                self.caps.max_count
            ));
        }
        self.check(size)?;
        self.count += 1;
        self.bytes += size;
        Ok(())
    }

    /// Accounts the real size of an attachment taken with an announced `announced` bytes;
    /// `Err` (nothing accounted) when it does not fit: the file is to be dropped.
    pub(crate) fn settle(&mut self, announced: u64, actual: u64) -> Result<(), String> {
        self.bytes -= announced;
        if let Err(why) = self.check(actual) {
            self.count -= 1;
            return Err(why);
        }
        self.bytes += actual;
        Ok(())
    }

    /// Bytes still allowed.
    pub(crate) fn bytes_left(&self) -> u64 {
        self.caps.max_bytes.saturating_sub(self.bytes)
    }

    fn check(&self, size: u64) -> Result<(), String> {
        match self.bytes.saturating_add(size) > self.caps.max_bytes {
            true => Err(format!(
                "skipped: one message's attachments may total {}",
                human(self.caps.max_bytes)
            )),
            false => Ok(()),
        }
    }
}

/// Returns `bytes` for people: `25 MB`, `1.5 MB`, `100 KB`, `512 bytes`.
fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000 && b % 1_000_000 == 0 => format!("{} MB", b / 1_000_000),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{} KB", b / 1_000),
        b => format!("{b} bytes"),
    }
}

/// Reads a download's body, refusing it once it passes `max` bytes (never held whole).
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    max: u64,
) -> anyhow::Result<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > max) {
        anyhow::bail!("larger than the {max} bytes allowed");
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if (body.len() + chunk.len()) as u64 > max {
            anyhow::bail!("larger than the {max} bytes allowed");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_ids_and_names_become_one_plain_name_inside_the_folder() {
        let dir = Path::new("/ws/.nanobot/media/telegram");
        let hostile = [
            "../../x",
            "/etc/x",
            "..",
            ".",
            "a/../../b",
            "C:\\evil",
            "a\0b",
            "",
            "报告/../../写入.pdf",
            "\u{202e}fdp.exe",
        ];
        for raw in hostile {
            for name in [
                safe_id(raw),
                safe_name(raw),
                stored_name(raw, raw),
                format!("{}.jpg", safe_id(raw)),
            ] {
                let path = path_in(dir, &name).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
                assert_eq!(path.parent(), Some(dir), "{raw:?} → {name:?}");
                assert!(!name.starts_with('.') && !name.contains(['/', '\\', '\0']));
            }
        }
        assert!(path_in(dir, "../x").is_err() && path_in(dir, "/etc/x").is_err());
        assert!(path_in(dir, "a\0b").is_err() && path_in(dir, "").is_err());
    }

    #[test]
    fn plain_ids_and_readable_names_are_kept_cjk_and_emoji_included() {
        assert_eq!(safe_id("AQADxyz-_12"), "AQADxyz-_12");
        let hashed = safe_id("../../x");
        assert!(hashed.starts_with('h') && hashed.len() == 33, "{hashed}");
        assert_ne!(hashed, safe_id("../../y"), "distinct ids stay distinct");
        assert_eq!(safe_id(&"a".repeat(65)).len(), 33, "too long is hashed");
        assert_eq!(safe_name("季度报告 2024.pdf"), "季度报告_2024.pdf");
        assert_eq!(safe_name("猫😺.png"), "猫_.png");
        assert_eq!(safe_name("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_name("..."), "file");
        assert_eq!(stored_name("F01", "a b.txt"), "F01_a_b.txt");
        let long = safe_name(&format!("{}.pdf", "长".repeat(100)));
        assert!(long.len() <= MAX_NAME && long.ends_with("长.pdf"), "{long}");
    }

    #[test]
    fn the_budget_bounds_count_and_total_bytes() {
        let mut budget = Budget::new(Caps {
            max_count: 3,
            max_bytes: 10_000_000,
        });
        assert!(budget.take(4_000_000).is_ok());
        assert!(budget.take(7_000_000).unwrap_err().contains("10 MB"));
        assert!(budget.take(0).is_ok(), "size unknown");
        assert!(budget.settle(0, 7_000_000).is_err(), "too large once known");
        assert_eq!(budget.bytes_left(), 6_000_000);
        assert!(budget.take(1_000_000).is_ok());
        assert!(budget.take(1).is_ok());
        assert!(budget.take(1).unwrap_err().contains("more than 3"));
        assert_eq!(
            [
                human(25_000_000),
                human(1_500_000),
                human(100_000),
                human(512)
            ],
            ["25 MB", "1.5 MB", "100 KB", "512 bytes"]
        );
    }
}
