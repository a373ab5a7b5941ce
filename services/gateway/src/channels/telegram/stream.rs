//! Streaming previews. Stream deltas are not durable: every replica sees them through its
//! observer, and only the holder of the token's poller lease acts on them (one preview per
//! reply). The first delta sends a plain preview; later deltas edit it at most every
//! `streamEditInterval`. The preview's message id is kept in [`keys::telegram_stream`], so the
//! final reply, delivered durably by whichever replica, edits the preview into the final HTML
//! instead of sending a new message, then marks the stream `final` so no late preview edit
//! follows.
//!
//! A preview is the whole reply so far, so it is shown only while it fits one message, counted
//! in UTF-16 code units as Telegram counts (upstream counts Python characters); its last
//! grapheme cluster waits for the next delta ([`measure::settled`]), so an emoji or an accent
//! arriving in pieces is never shown halved.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::AsyncCommands as _;

use nanobot_proto::{OutboundKind, OutboundMessage, keys};

use super::outbound::{self, Target};
use super::{TelegramChannel, thread_of};
use crate::channels::stream::{self, FINAL, RECORD_TTL_SECS};
use crate::channels::{Progress, SendError};
use crate::render::measure::{self, Limit};
use crate::render::telegram::{
    HtmlChunk, MAX_HTML_LEN, MAX_MESSAGE_LEN, escape_html, strip_markdown,
};

/// Previews this replica is editing, by the inbound id they answer.
#[derive(Debug, Default)]
pub(super) struct Streams {
    previews: Mutex<HashMap<String, Preview>>,
}

#[derive(Debug, Clone)]
struct Preview {
    text: String,
    message_id: Option<i32>,
    last_edit: Instant,
    shown: usize,
}

/// Acts on an observed outbound message: deltas update the preview (lease holder only); the
/// end of a stream or a final reply forgets it; a final reply stops typing on this replica.
pub(super) async fn observe(ch: &TelegramChannel, msg: &OutboundMessage) {
    let kind = OutboundKind::try_from(msg.kind).unwrap_or(OutboundKind::Final);
    match kind {
        OutboundKind::StreamDelta if ch.cfg.streaming && ch.is_holder() => delta(ch, msg).await,
        OutboundKind::StreamEnd => {
            ch.streams.lock().remove(&msg.reply_to);
        }
        OutboundKind::Final | OutboundKind::Error => {
            ch.streams.lock().remove(&msg.reply_to);
            if let Ok(chat) = msg.chat_id.parse() {
                ch.typing.stop(chat);
            }
        }
        _ => {}
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Preview>> {
        self.previews.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn delta(ch: &TelegramChannel, msg: &OutboundMessage) {
    let Ok(chat) = msg.chat_id.parse::<i64>() else {
        return;
    };
    let interval = Duration::from_secs_f64(ch.cfg.stream_edit_interval);
    let preview = {
        let mut previews = ch.streams.lock();
        let entry = previews
            .entry(msg.reply_to.clone())
            .or_insert_with(|| Preview {
                text: String::new(),
                message_id: None,
                last_edit: Instant::now(),
                shown: 0,
            });
        entry.text.push_str(&msg.content);
        entry.clone()
    };
    let settled = measure::settled(&preview.text).len();
    let Some(plain) = preview_of(&preview.text) else {
        return;
    };
    let key = keys::telegram_stream(&ch.bot_id, &msg.reply_to);
    let mut conn = ch.redis.clone();
    let Some(id) = preview.message_id else {
        if !matches!(stream::claim(&mut conn, &key).await, Ok(true)) {
            return;
        }
        let target = Target {
            chat,
            thread: thread_of(&msg.session_key),
            reply_to: None,
        };
        match outbound::send_text(ch, target, &escape_html(&plain), &plain).await {
            Ok(sent) => {
                let _: redis::RedisResult<()> = conn.set_ex(&key, sent.id.0, RECORD_TTL_SECS).await;
                if let Some(p) = ch.streams.lock().get_mut(&msg.reply_to) {
                    p.message_id = Some(sent.id.0);
                    p.last_edit = Instant::now();
                    p.shown = settled;
                }
            }
            Err(e) => {
                tracing::debug!(bot = %ch.bot_id, error = %e, "telegram stream preview not sent");
                let _: redis::RedisResult<()> = conn.del(&key).await;
            }
        }
        return;
    };
    if preview.last_edit.elapsed() < interval || preview.shown == settled {
        return;
    }
    let state: Option<String> = conn.get(&key).await.ok().flatten();
    if state.as_deref() == Some(FINAL) {
        ch.streams.lock().remove(&msg.reply_to);
        return;
    }
    if let Err(e) = outbound::edit_text(ch, chat, id, None, &plain).await {
        tracing::debug!(bot = %ch.bot_id, error = %e, "telegram stream preview not edited");
    }
    if let Some(p) = ch.streams.lock().get_mut(&msg.reply_to) {
        p.last_edit = Instant::now();
        p.shown = settled;
    }
}

/// Returns the plain-text preview of the reply so far (`markdown`): its settled clusters
/// without Markdown syntax; `None` when that is blank, or when the reply no longer fits one
/// message (upstream's 4000 for the Markdown, 4096 for what is sent, both in UTF-16 units):
/// the final reply splits it.
fn preview_of(markdown: &str) -> Option<String> {
    let settled = measure::settled(markdown);
    let plain = strip_markdown(settled);
    let fits = Limit::utf16(MAX_MESSAGE_LEN).fits(settled)
        && Limit::utf16(MAX_HTML_LEN).fits(&escape_html(&plain));
    (fits && !plain.trim().is_empty()).then_some(plain)
}

/// When the reply was streamed into a preview, edits it into `first` (the final reply's first
/// chunk) and returns true; false when there is no preview (send normally).
pub(super) async fn finish(
    ch: &TelegramChannel,
    msg: &OutboundMessage,
    target: Target,
    first: Option<&HtmlChunk>,
    progress: &mut Progress,
) -> Result<bool, SendError> {
    if !ch.cfg.streaming {
        return Ok(false);
    }
    let key = keys::telegram_stream(&ch.bot_id, &msg.reply_to);
    let mut conn = ch.redis.clone();
    let state = stream::settled(&mut conn, &key)
        .await
        .map_err(|e| SendError::Transient(format!("read stream record: {e}")))?;
    let preview: Option<i32> = state.as_deref().and_then(|s| s.parse().ok());
    let _: redis::RedisResult<()> = conn.set_ex(&key, FINAL, RECORD_TTL_SECS).await;
    let Some(id) = preview else {
        return Ok(false);
    };
    if progress.done() == 0 {
        if let Some(chunk) = first {
            outbound::edit_text(ch, target.chat, id, Some(&chunk.html), &chunk.markdown).await?;
        }
        progress.part_done().await;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns the preview of `md` as a person sees it (trailing whitespace aside).
    fn shown(md: &str) -> Option<String> {
        preview_of(md).map(|p| p.trim_end().to_string())
    }

    #[test]
    fn a_preview_never_shows_half_a_grapheme() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        // The family arrives in pieces: until a later character settles it, it is held back.
        assert_eq!(shown("Hi👩\u{200d}👩").as_deref(), Some("Hi"));
        assert_eq!(
            shown(&format!("Hi {family}!")),
            Some(format!("Hi {family}"))
        );
        assert_eq!(shown("cafe\u{301}").as_deref(), Some("caf"));
        assert_eq!(shown("cafe\u{301}!").as_deref(), Some("cafe\u{301}"));
        assert_eq!(shown("**中文** 🇨🇳\n").as_deref(), Some("中文 🇨🇳"));
        assert_eq!(shown("שלום עולם.").as_deref(), Some("שלום עולם"));
        assert_eq!(shown("  x"), None);
    }

    #[test]
    fn a_preview_stops_when_telegram_would_count_it_too_long() {
        // 2,100 emoji are 2,100 characters but 4,200 UTF-16 units: over one message.
        let emoji = "😀".repeat(2100);
        assert_eq!(preview_of(&emoji), None);
        let fits = "😀".repeat(1999);
        assert_eq!(shown(&format!("{fits}!")), Some(fits));
        // Escaping grows what is sent: 1,400 "&" are 7,000 units as HTML.
        assert_eq!(preview_of(&"& ".repeat(1400)), None);
        assert!(preview_of(&"مرحبا ".repeat(600)).is_some());
    }
}
