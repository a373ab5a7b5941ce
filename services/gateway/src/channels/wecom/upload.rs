//! Files the agent sends, uploaded over the long connection in WeCom's three steps
//! (`aibot_upload_media_init` with name, type, size, chunk count and md5 → an `upload_id`;
//! `aibot_upload_media_chunk` with each 512 KiB base64 chunk; `aibot_upload_media_finish` → a
//! `media_id`), then sent as an image, voice, video or file message. At most 200 MB, as 0.3.5.

use std::path::Path;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use serde_json::{Value, json};

use super::link::Link;

/// WeCom's largest upload.
pub(super) const MAX_UPLOAD: u64 = 200 * 1024 * 1024;
/// Raw bytes per chunk (before base64).
const CHUNK: usize = 512 * 1024;

const INIT: &str = "aibot_upload_media_init";
const CHUNK_CMD: &str = "aibot_upload_media_chunk";
const FINISH: &str = "aibot_upload_media_finish";

/// An uploaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Uploaded {
    /// `image`, `voice`, `video` or `file`.
    pub kind: &'static str,
    /// WeCom's id of it.
    pub media_id: String,
}

impl Uploaded {
    /// Returns the message body showing it.
    pub fn body(&self) -> Value {
        json!({"msgtype": self.kind, self.kind: {"media_id": self.media_id}})
    }
}

/// Returns WeCom's media type of a file name, by extension.
pub(super) fn kind_of(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jpg" | "jpeg" | "png" | "gif" | "webp" | "bmp" => "image",
        "mp4" | "avi" | "mov" => "video",
        "amr" | "mp3" | "wav" | "ogg" => "voice",
        _ => "file",
    }
}

fn req_id(step: &str) -> String {
    format!("{step}_{}", uuid::Uuid::new_v4().simple())
}

/// Uploads the file at `path`; an error says which step failed (a missing or too large file
/// included).
pub(super) async fn upload(link: &Link, path: &Path) -> anyhow::Result<Uploaded> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| anyhow::anyhow!("not readable: {e}"))?;
    anyhow::ensure!(meta.is_file(), "not a file");
    anyhow::ensure!(
        meta.len() <= MAX_UPLOAD,
        "{} bytes is over WeCom's {MAX_UPLOAD}",
        meta.len()
    );
    let data = tokio::fs::read(path)
        .await
        .map_err(|e| anyhow::anyhow!("not readable: {e}"))?;
    let name = crate::channels::media::safe_name(
        &path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let kind = kind_of(&name);
    let chunks: Vec<&[u8]> = data.chunks(CHUNK).collect();
    let md5 = hex::encode(Md5::digest(&data));
    let init = json!({"filename": name, "type": kind, "total_size": data.len(),
                      "total_chunks": chunks.len(), "md5": md5});
    let answer = link.request(INIT, &req_id("upload_init"), init).await?;
    let upload_id = answer.body["upload_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    anyhow::ensure!(!upload_id.is_empty(), "upload init answered no upload_id");
    let b64 = base64::engine::general_purpose::STANDARD;
    for (index, chunk) in chunks.iter().enumerate() {
        let body = json!({"upload_id": upload_id, "chunk_index": index,
                          "total_chunks": chunks.len(), "base64_data": b64.encode(chunk)});
        link.request(CHUNK_CMD, &req_id("upload_chunk"), body)
            .await?;
    }
    let finish = json!({"upload_id": upload_id, "filename": name, "media_type": kind});
    let answer = link
        .request(FINISH, &req_id("upload_finish"), finish)
        .await?;
    let media_id = answer.body["media_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    anyhow::ensure!(!media_id.is_empty(), "upload finish answered no media_id");
    Ok(Uploaded { kind, media_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_follow_the_extension() {
        assert_eq!(kind_of("图.PNG"), "image");
        assert_eq!(kind_of("clip.mov"), "video");
        assert_eq!(kind_of("语音.amr"), "voice");
        assert_eq!(kind_of("报告.pdf"), "file");
        assert_eq!(kind_of("noext"), "file");
    }
}
