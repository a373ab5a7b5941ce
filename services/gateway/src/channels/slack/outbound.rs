//! Sending, as upstream: the text as mrkdwn chunks of at most
//! [`MAX_MESSAGE_LEN`](crate::render::slack::MAX_MESSAGE_LEN) characters with
//! `chat.postMessage` in the session's thread, then each file through Slack's external upload
//! (`files.getUploadURLExternal`, the upload, `files.completeUploadExternal`) in the same
//! thread; a file that cannot be sent becomes `[Failed to send: {name}]`. A final reply swaps
//! the receipt reaction for `doneEmoji` (best effort). Tool hints are a quote of literal text.
//! With `streaming`, a final reply whose deltas were previewed edits the preview into its first
//! chunk (`chat.update`) instead of posting it.

use std::path::Path;

use async_trait::async_trait;
use serde_json::{Value, json};

use nanobot_proto::{OutboundKind, OutboundMessage};

use super::SlackChannel;
use super::api::ApiError;
use super::inbound::{thread_of, ts_of};
use crate::channels::stream::Editor;
use crate::channels::{Progress, SendError};
use crate::render::slack::{MAX_MESSAGE_LEN, split_mrkdwn, tool_hint};

/// Delivers one outbound message; parts are the text chunks, then the files.
pub(super) async fn send(
    ch: &SlackChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let chat = msg.chat_id.as_str();
    let thread = thread_of(&msg.session_key, chat);
    let kind = OutboundKind::try_from(msg.kind).unwrap_or(OutboundKind::Final);
    let chunks = match kind {
        OutboundKind::ToolHint => vec![tool_hint(&msg.content)],
        // Upstream posts " " for an empty reply without files; we post nothing.
        _ if msg.content.is_empty() => Vec::new(),
        _ => split_mrkdwn(&msg.content, MAX_MESSAGE_LEN),
    };
    let last = matches!(kind, OutboundKind::Final | OutboundKind::Error);
    if ch.cfg.streaming
        && last
        && let Some(first) = chunks.first()
        && let Some(ts) = ch.streams.finish(msg).await?
        && progress.done() == 0
    {
        match update(ch, chat, &ts, first).await {
            Ok(_) => {}
            Err(e) if e.is_transient() => return Err(classify(e)),
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %e, "slack preview not updated; posting the reply");
                post(ch, chat, thread, first).await.map_err(classify)?;
            }
        }
        progress.part_done().await;
    }
    for (i, chunk) in chunks.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        post(ch, chat, thread, chunk).await.map_err(classify)?;
        progress.part_done().await;
    }
    for (i, path) in msg.media.iter().enumerate() {
        if chunks.len() + i < progress.done() {
            continue;
        }
        let path = Path::new(path);
        if let Err(e) = upload(ch, chat, thread, path).await {
            if e.is_transient() {
                return Err(classify(e));
            }
            tracing::warn!(bot = %ch.bot_id, error = %e, "slack file not sent");
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let note = crate::render::slack::escape(&format!("[Failed to send: {name}]"));
            post(ch, chat, thread, &note).await.map_err(classify)?;
        }
        progress.part_done().await;
    }
    if last {
        swap_reaction(ch, chat, &msg.reply_to).await;
    }
    Ok(())
}

async fn post(
    ch: &SlackChannel,
    chat: &str,
    thread: Option<&str>,
    text: &str,
) -> Result<Value, ApiError> {
    let mut body = json!({"channel": chat, "text": text, "mrkdwn": true});
    if let Some(ts) = thread {
        body["thread_ts"] = json!(ts);
    }
    ch.api.call("chat.postMessage", &body).await
}

/// Replaces the text of message `ts` (`chat.update`).
async fn update(ch: &SlackChannel, chat: &str, ts: &str, text: &str) -> Result<Value, ApiError> {
    let body = json!({"channel": chat, "ts": ts, "text": text, "mrkdwn": true});
    ch.api.call("chat.update", &body).await
}

#[async_trait]
impl Editor for SlackChannel {
    async fn post_preview(&self, msg: &OutboundMessage, text: &str) -> Result<String, SendError> {
        let chat = msg.chat_id.as_str();
        let posted = post(self, chat, thread_of(&msg.session_key, chat), text)
            .await
            .map_err(classify)?;
        posted["ts"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| SendError::Permanent("chat.postMessage answered no ts".into()))
    }

    async fn edit(&self, msg: &OutboundMessage, id: &str, text: &str) -> Result<(), SendError> {
        update(self, &msg.chat_id, id, text)
            .await
            .map(drop)
            .map_err(classify)
    }

    fn first_chunk(&self, text: &str) -> String {
        split_mrkdwn(text, MAX_MESSAGE_LEN)
            .into_iter()
            .next()
            .unwrap_or_default()
    }
}

/// Uploads one file into the conversation (and thread).
async fn upload(
    ch: &SlackChannel,
    chat: &str,
    thread: Option<&str>,
    path: &Path,
) -> Result<(), ApiError> {
    let unreadable = |e: std::io::Error| ApiError::Slack {
        method: "file upload".into(),
        code: format!("unreadable file: {}", e.kind()),
    };
    let bytes = tokio::fs::read(path).await.map_err(unreadable)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let length = bytes.len().to_string();
    let ticket = ch
        .api
        .call_args(
            "files.getUploadURLExternal",
            &[("filename", &name), ("length", &length)],
        )
        .await?;
    let (Some(url), Some(file_id)) = (ticket["upload_url"].as_str(), ticket["file_id"].as_str())
    else {
        return Err(ApiError::Slack {
            method: "files.getUploadURLExternal".into(),
            code: "no upload_url".into(),
        });
    };
    ch.api.upload(url, &name, bytes).await?;
    let files = json!([{"id": file_id, "title": name}]).to_string();
    let mut args = vec![("files", files.as_str()), ("channel_id", chat)];
    if let Some(ts) = thread {
        args.push(("thread_ts", ts));
    }
    ch.api
        .call_args("files.completeUploadExternal", &args)
        .await?;
    Ok(())
}

/// Removes the receipt reaction from the answered message and adds `doneEmoji` (best effort).
async fn swap_reaction(ch: &SlackChannel, chat: &str, reply_to: &str) {
    let Some(ts) = ts_of(reply_to) else {
        return;
    };
    if !reply_to.starts_with(&format!("slack:{chat}:")) {
        return;
    }
    for (method, name) in [
        ("reactions.remove", &ch.cfg.react_emoji),
        ("reactions.add", &ch.cfg.done_emoji),
    ] {
        if name.is_empty() {
            continue;
        }
        let body = json!({"channel": chat, "name": name, "timestamp": ts});
        if let Err(e) = ch.api.call(method, &body).await {
            tracing::debug!(bot = %ch.bot_id, method, error = %e, "slack reaction not updated");
        }
    }
}

/// Maps a failed call to redeliver-later or give-up.
fn classify(e: ApiError) -> SendError {
    match e.is_transient() {
        true => SendError::Transient(e.to_string()),
        false => SendError::Permanent(e.to_string()),
    }
}
