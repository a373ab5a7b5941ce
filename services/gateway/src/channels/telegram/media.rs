//! Attachments: downloaded into the bot's workspace media folder
//! (`<workspace>/.nanobot/media/telegram/{file_unique_id}{ext}`, so a re-fetched update finds
//! its file already there), and voice/audio transcribed through an OpenAI-compatible
//! `/audio/transcriptions` endpoint (`providers.groq`, as upstream; any `apiBase`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use teloxide::net::Download as _;
use teloxide::requests::Requester as _;
use teloxide::types::FileId;

use nanobot_runtime::config::Config;

use super::TelegramChannel;
use super::inbound::MediaRef;

/// Groq's OpenAI-compatible root, upstream's default transcription endpoint.
const GROQ_API: &str = "https://api.groq.com/openai/v1";
/// Upstream's transcription model.
const WHISPER_MODEL: &str = "whisper-large-v3";
/// Longest a transcription may take.
const TRANSCRIBE_TIMEOUT: Duration = Duration::from_secs(60);

/// An OpenAI-compatible transcription endpoint.
#[derive(Debug, Clone)]
pub(super) struct Transcriber {
    url: String,
    api_key: String,
    model: String,
    http: reqwest::Client,
}

impl Transcriber {
    /// Returns the transcriber of `providers.groq` when it has a key or a base URL.
    pub(super) fn from_config(cfg: &Config) -> Option<Self> {
        let groq = cfg.providers.get("groq")?;
        if groq.api_key.is_empty() && groq.api_base.is_none() {
            return None;
        }
        let base = groq.api_base.as_deref().unwrap_or(GROQ_API);
        let model = cfg
            .transcription
            .get("model")
            .and_then(|m| m.as_str())
            .unwrap_or(WHISPER_MODEL);
        Some(Self {
            url: format!("{}/audio/transcriptions", base.trim_end_matches('/')),
            api_key: groq.api_key.clone(),
            model: model.to_string(),
            http: reqwest::Client::builder()
                .timeout(TRANSCRIBE_TIMEOUT)
                .build()
                .ok()?,
        })
    }

    async fn transcribe(&self, path: &Path) -> anyhow::Result<String> {
        let bytes = tokio::fs::read(path).await.context("read the audio file")?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audio.ogg".into());
        let form = reqwest::multipart::Form::new()
            .text("model", self.model.clone())
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name(name),
            );
        let mut request = self.http.post(&self.url).multipart(form);
        if !self.api_key.is_empty() {
            request = request.bearer_auth(&self.api_key);
        }
        let response = request.send().await.context("transcription request")?;
        let status = response.status();
        if !status.is_success() {
            anyhow::bail!("transcription endpoint answered {status}");
        }
        let body: serde_json::Value = response.json().await.context("transcription body")?;
        Ok(body
            .get("text")
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .trim()
            .to_string())
    }
}

/// Downloads `media` into the media folder (once) and returns its absolute path.
pub(super) async fn save(ch: &TelegramChannel, media: &MediaRef) -> anyhow::Result<PathBuf> {
    let path = ch
        .media_dir
        .join(format!("{}{}", media.unique_id, media.ext));
    if tokio::fs::metadata(&path).await.is_ok_and(|m| m.len() > 0) {
        return Ok(path);
    }
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .context("create the media folder")?;
    let file = ch
        .api
        .get_file(FileId(media.file_id.clone()))
        .await
        .map_err(|e| anyhow::anyhow!("getFile: {}", ch.redact(&e.to_string())))?;
    let partial = path.with_extension("part");
    let mut out = tokio::fs::File::create(&partial)
        .await
        .context("create the media file")?;
    ch.api
        .download_file(&file.path, &mut out)
        .await
        .map_err(|e| anyhow::anyhow!("download: {}", ch.redact(&e.to_string())))?;
    tokio::fs::rename(&partial, &path)
        .await
        .context("move the media file in place")?;
    Ok(path)
}

/// Transcribes an audio file; `None` (logged) when no endpoint is configured or it fails, so
/// the message still goes through with its `[voice: path]` line instead.
pub(super) async fn transcribe(ch: &TelegramChannel, path: &Path) -> Option<String> {
    let transcriber = ch.transcriber.as_ref()?;
    match transcriber.transcribe(path).await {
        Ok(text) if !text.is_empty() => Some(text),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = format!("{e:#}"), "transcription failed");
            None
        }
    }
}
