//! Attachments: downloaded into the bot's workspace media folder
//! (`<workspace>/.nanobot/media/telegram/{file_unique_id}{ext}`, a hash standing for an id
//! that is not a plain one, so a re-fetched update finds its file already there; within the
//! per-message caps of [`crate::channels::media`]), and voice/audio transcribed through an OpenAI-compatible
//! `/audio/transcriptions` endpoint (`providers.groq`, as upstream; any `apiBase`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use teloxide::RequestError;
use teloxide::net::Download as _;
use teloxide::requests::Requester as _;
use teloxide::types::FileId;

use nanobot_runtime::config::Config;

use super::TelegramChannel;
use super::inbound::MediaRef;
use crate::channels::media::{self, Budget};

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

/// Why an attachment was not saved.
#[derive(Debug)]
pub(super) enum NotSaved {
    /// Telegram refused it (gone, over its 20 MB download limit) or it broke the caps: the
    /// turn goes on without it and says why.
    Skipped(String),
    /// A failure that may pass (network, disk): the update is handled again.
    Failed(anyhow::Error),
}

/// Downloads `media` into the media folder (once) and returns its absolute path. The stored
/// name is the file's unique id when it is a plain id, else a hash of it
/// ([`media::safe_id`]): a platform id is never a path.
pub(super) async fn save(
    ch: &TelegramChannel,
    media: &MediaRef,
    budget: &mut Budget,
) -> Result<PathBuf, NotSaved> {
    let name = format!("{}{}", media::safe_id(&media.unique_id), media.ext);
    let path = media::path_in(&ch.media_dir, &name).map_err(NotSaved::Failed)?;
    budget.take(media.size).map_err(NotSaved::Skipped)?;
    if let Some(len) = tokio::fs::metadata(&path).await.ok().map(|m| m.len())
        && len > 0
    {
        budget.settle(media.size, len).map_err(NotSaved::Skipped)?;
        return Ok(path);
    }
    let fetched = download(ch, media, &path).await;
    let len = match fetched {
        Ok(len) => len,
        Err(e) => {
            budget.settle(media.size, 0).ok();
            return Err(e);
        }
    };
    if let Err(why) = budget.settle(media.size, len) {
        tokio::fs::remove_file(&path).await.ok();
        return Err(NotSaved::Skipped(why));
    }
    Ok(path)
}

/// Downloads the file to `path` (written aside, then renamed); returns its length.
async fn download(ch: &TelegramChannel, media: &MediaRef, path: &Path) -> Result<u64, NotSaved> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        NotSaved::Failed(anyhow::anyhow!("{what}: {}", ch.redact(&e.to_string())))
    };
    tokio::fs::create_dir_all(&ch.media_dir)
        .await
        .map_err(|e| failed("create the media folder", &e))?;
    let file = match ch.api.get_file(FileId(media.file_id.clone())).await {
        Ok(file) => file,
        Err(RequestError::Api(e)) => {
            tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram refused a file; the turn goes on without it");
            return Err(NotSaved::Skipped("download refused by Telegram".into()));
        }
        Err(e) => return Err(failed("getFile", &e)),
    };
    let partial = path.with_extension("part");
    let mut out = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| failed("create the media file", &e))?;
    ch.api
        .download_file(&file.path, &mut out)
        .await
        .map_err(|e| failed("download", &e))?;
    let len = out
        .metadata()
        .await
        .map_err(|e| failed("read the media file", &e))?
        .len();
    tokio::fs::rename(&partial, path)
        .await
        .map_err(|e| failed("move the media file in place", &e))?;
    Ok(len)
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
