//! Sending, as upstream: media by type, then the text as HTML chunks of at most 4096
//! characters (split at 4000 Markdown characters, never inside an unbalanced code fence), each
//! falling back to plain text when Telegram cannot parse the HTML; flood control (429
//! `retry_after`) and network failures retried in place; tool hints as an expandable quote.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use teloxide::payloads::{
    EditMessageTextSetters as _, SendAudioSetters as _, SendDocumentSetters as _,
    SendMessageSetters as _, SendPhotoSetters as _, SendVideoSetters as _, SendVoiceSetters as _,
    SetMessageReactionSetters as _,
};
use teloxide::requests::Requester as _;
use teloxide::types::{
    ChatId, InputFile, Message, MessageId, ParseMode, ReplyParameters, ThreadId,
};
use teloxide::{ApiError, RequestError};

use nanobot_proto::{OutboundKind, OutboundMessage};

use super::receive::message_id_of;
use super::{TelegramChannel, stream, thread_of};
use crate::channels::{Progress, SendError};
use crate::render::telegram::{HtmlChunk, MAX_HTML_LEN, split_markdown_html, tool_hint_html};

/// Attempts per call when Telegram asks to wait or the network fails, as upstream.
const ATTEMPTS: u32 = 3;

/// Where a message goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target {
    pub(super) chat: i64,
    pub(super) thread: Option<i32>,
    pub(super) reply_to: Option<i32>,
}

/// Delivers one outbound message.
pub(super) async fn send(
    ch: &TelegramChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    let chat: i64 = msg
        .chat_id
        .parse()
        .map_err(|_| SendError::Permanent(format!("chat id {:?} is not a number", msg.chat_id)))?;
    let mut target = Target {
        chat,
        thread: thread_of(&msg.session_key),
        reply_to: None,
    };
    let kind = OutboundKind::try_from(msg.kind).unwrap_or(OutboundKind::Final);
    if kind == OutboundKind::ToolHint {
        if progress.done() == 0 {
            let html = tool_hint_html(&msg.content);
            send_text(ch, target, &html, &msg.content).await?;
            progress.part_done().await;
        }
        return Ok(());
    }
    if kind == OutboundKind::Progress {
        return send_parts(ch, target, msg, progress).await;
    }
    ch.typing.stop(chat);
    if ch.cfg.reply_to_message {
        target.reply_to = message_id_of(&msg.reply_to);
    }
    let chunks = split_markdown_html(&msg.content, MAX_HTML_LEN);
    let took_over = stream::finish(ch, msg, target, chunks.first(), progress).await?;
    if !took_over {
        send_parts(ch, target, msg, progress).await?;
    } else {
        let rest = chunks.get(1..).unwrap_or_default();
        send_chunks(ch, target, rest, 1, progress).await?;
    }
    clear_reaction(ch, chat, &msg.reply_to).await;
    Ok(())
}

/// Sends the message's media, then its text chunks, skipping parts sent before.
async fn send_parts(
    ch: &TelegramChannel,
    target: Target,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    for (i, path) in msg.media.iter().enumerate() {
        if i < progress.done() {
            continue;
        }
        if let Err(e) = send_media(ch, target, Path::new(path)).await {
            tracing::warn!(bot = %ch.bot_id, error = %e, "telegram media not sent");
            let name = Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let note = format!("[Failed to send: {name}]");
            send_text(ch, target, &note, &note).await?;
        }
        progress.part_done().await;
    }
    let chunks = split_markdown_html(&msg.content, MAX_HTML_LEN);
    send_chunks(ch, target, &chunks, msg.media.len(), progress).await
}

/// Sends `chunks` as messages; chunk `i` is part `first_part + i`.
async fn send_chunks(
    ch: &TelegramChannel,
    target: Target,
    chunks: &[HtmlChunk],
    first_part: usize,
    progress: &mut Progress,
) -> Result<(), SendError> {
    for (i, chunk) in chunks.iter().enumerate() {
        if first_part + i < progress.done() {
            continue;
        }
        send_text(ch, target, &chunk.html, &chunk.markdown).await?;
        progress.part_done().await;
    }
    Ok(())
}

/// Sends `html`, or `plain` without a parse mode when Telegram rejects the HTML.
pub(super) async fn send_text(
    ch: &TelegramChannel,
    target: Target,
    html: &str,
    plain: &str,
) -> Result<Message, SendError> {
    let sent = retry(ch, || {
        let mut req = ch
            .api
            .send_message(ChatId(target.chat), html)
            .parse_mode(ParseMode::Html);
        if let Some(t) = target.thread {
            req = req.message_thread_id(ThreadId(MessageId(t)));
        }
        if let Some(r) = target.reply_to {
            req = req
                .reply_parameters(ReplyParameters::new(MessageId(r)).allow_sending_without_reply());
        }
        req
    })
    .await;
    match sent {
        Err(RequestError::Api(ApiError::CantParseEntities(_))) => {
            tracing::info!(bot = %ch.bot_id, "telegram refused the html; sending plain text");
            retry(ch, || {
                let mut req = ch.api.send_message(ChatId(target.chat), plain);
                if let Some(t) = target.thread {
                    req = req.message_thread_id(ThreadId(MessageId(t)));
                }
                req
            })
            .await
            .map_err(|e| classify(ch, e))
        }
        other => other.map_err(|e| classify(ch, e)),
    }
}

/// Edits message `id` to `html` (plain on an HTML error); "not modified" counts as done.
pub(super) async fn edit_text(
    ch: &TelegramChannel,
    chat: i64,
    id: i32,
    html: Option<&str>,
    plain: &str,
) -> Result<(), SendError> {
    let edited = match html {
        Some(html) => {
            retry(ch, || {
                ch.api
                    .edit_message_text(ChatId(chat), MessageId(id), html)
                    .parse_mode(ParseMode::Html)
            })
            .await
        }
        None => Err(RequestError::Api(
            ApiError::CantParseEntities(String::new()),
        )),
    };
    let edited = match edited {
        Err(RequestError::Api(ApiError::CantParseEntities(_))) => {
            retry(ch, || {
                ch.api.edit_message_text(ChatId(chat), MessageId(id), plain)
            })
            .await
        }
        other => other,
    };
    match edited {
        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        Err(e) => Err(classify(ch, e)),
    }
}

async fn send_media(ch: &TelegramChannel, target: Target, path: &Path) -> Result<(), SendError> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let chat = ChatId(target.chat);
    let thread = target.thread.map(|t| ThreadId(MessageId(t)));
    let file = || InputFile::file(path);
    let sent = match ext.as_str() {
        "jpg" | "jpeg" | "png" | "webp" => retry(ch, || {
            with_thread(ch.api.send_photo(chat, file()), thread, |r, t| {
                r.message_thread_id(t)
            })
        })
        .await
        .map(drop),
        "ogg" | "oga" | "opus" => retry(ch, || {
            with_thread(ch.api.send_voice(chat, file()), thread, |r, t| {
                r.message_thread_id(t)
            })
        })
        .await
        .map(drop),
        "mp3" | "m4a" | "wav" | "flac" => retry(ch, || {
            with_thread(ch.api.send_audio(chat, file()), thread, |r, t| {
                r.message_thread_id(t)
            })
        })
        .await
        .map(drop),
        "mp4" | "mov" | "webm" => retry(ch, || {
            with_thread(ch.api.send_video(chat, file()), thread, |r, t| {
                r.message_thread_id(t)
            })
        })
        .await
        .map(drop),
        _ => retry(ch, || {
            with_thread(ch.api.send_document(chat, file()), thread, |r, t| {
                r.message_thread_id(t)
            })
        })
        .await
        .map(drop),
    };
    sent.map_err(|e| classify(ch, e))
}

fn with_thread<R>(req: R, thread: Option<ThreadId>, set: impl FnOnce(R, ThreadId) -> R) -> R {
    match thread {
        Some(t) => set(req, t),
        None => req,
    }
}

/// Removes the receipt reaction from the answered message (best effort).
async fn clear_reaction(ch: &TelegramChannel, chat: i64, reply_to: &str) {
    if ch.cfg.react_emoji.is_empty() {
        return;
    }
    let Some(id) = message_id_of(reply_to) else {
        return;
    };
    let cleared = ch
        .api
        .set_message_reaction(ChatId(chat), MessageId(id))
        .reaction(Vec::new())
        .await;
    if let Err(e) = cleared {
        tracing::debug!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), "telegram reaction not cleared");
    }
}

/// Runs `make()`'s request up to [`ATTEMPTS`] times, waiting out flood control and backing off
/// on network errors (0.5 s, then 1 s).
async fn retry<T, R, F>(ch: &TelegramChannel, mut make: F) -> Result<T, RequestError>
where
    F: FnMut() -> R,
    R: std::future::IntoFuture<Output = Result<T, RequestError>>,
    R::IntoFuture: Future<Output = Result<T, RequestError>>,
{
    let mut backoff = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        let result = make().into_future().await;
        let wait = match &result {
            Err(RequestError::RetryAfter(secs)) => secs.duration(),
            Err(RequestError::Network(_)) => {
                let wait = backoff;
                backoff *= 2;
                wait
            }
            _ => return result,
        };
        if attempt >= ATTEMPTS {
            return result;
        }
        tracing::info!(bot = %ch.bot_id, attempt, wait = ?wait, "telegram call retried");
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// Whether an error Telegram described is on its side (flood control, a 5xx), so worth
/// delivering again later.
fn is_server_side(description: &str) -> bool {
    [
        "Too Many Requests",
        "Internal Server Error",
        "Bad Gateway",
        "Service Unavailable",
        "Gateway Timeout",
    ]
    .iter()
    .any(|phrase| description.contains(phrase))
}

/// Maps a failed call to redeliver-later or give-up.
fn classify(ch: &TelegramChannel, e: RequestError) -> SendError {
    let text = ch.redact(&e.to_string());
    match e {
        RequestError::RetryAfter(_)
        | RequestError::Network(_)
        | RequestError::Io(_)
        | RequestError::InvalidJson { .. } => SendError::Transient(text),
        RequestError::Api(ApiError::Unknown(ref d)) if is_server_side(d) => {
            SendError::Transient(text)
        }
        RequestError::Api(_) | RequestError::MigrateToChatId(_) => SendError::Permanent(text),
    }
}
