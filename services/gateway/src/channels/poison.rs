//! What keeps one bad platform update from wedging a channel. Every channel retries an update
//! until its inbound message is published (a NATS or Redis outage loses nothing), so an
//! update that can *never* be published or handled would be retried forever and block every
//! later update of the bot. Two such causes are removed here, for every channel:
//!
//! - text over the broker's message limit (`max_payload`, 1 MB by default): [`fit`] cuts the
//!   content at a grapheme boundary so the message fits, and ends it with a note saying how
//!   much was kept, which the model sees (and so can tell the user). The payload store
//!   ([`nanobot_runtime::payloads`]) carries outbound replies only: the runners read the
//!   inbound text from the message itself, and a user's multi-megabyte text is more than a
//!   model's context anyway;
//! - a handler that panics on hostile input (a parser's assertion): [`guard`] turns the panic
//!   into [`Failure::Poison`], which the caller logs, acknowledges and skips.

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;
use prost::Message as _;
use unicode_segmentation::UnicodeSegmentation as _;

use nanobot_proto::InboundMessage;

/// Room left under the broker's limit for headers (trace context, de-duplication id).
const HEADROOM: usize = 16 * 1024;

/// Why an update's handler did not finish.
#[derive(Debug)]
pub(crate) enum Failure {
    /// It failed in a way that may pass (the bus or Redis unreachable): handle it again.
    Retry(anyhow::Error),
    /// It can never be handled (its handler panicked): log it, acknowledge it and go on.
    Poison(String),
}

/// Runs one update's handler, turning a panic into [`Failure::Poison`].
pub(crate) async fn guard<T, F>(handler: F) -> Result<T, Failure>
where
    F: Future<Output = anyhow::Result<T>>,
{
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Failure::Retry(e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Failure::Poison(what))
        }
    }
}

/// Returns `msg` as it fits in one broker message of `limit` bytes (0: no limit known): as it
/// is when it fits, else with its content cut and a note appended.
pub(crate) fn fit(msg: &InboundMessage, limit: usize) -> Cow<'_, InboundMessage> {
    let len = msg.encoded_len();
    if limit == 0 || len + HEADROOM <= limit {
        return Cow::Borrowed(msg);
    }
    let total = msg.content.chars().count();
    let others = len - msg.content.len();
    // The note and the length prefix of the content (at most 10 bytes) come out of the budget.
    let note_room = 200;
    let budget = limit.saturating_sub(HEADROOM + others + note_room + 10);
    let cut = cut_at_grapheme(&msg.content, budget);
    let kept = cut.chars().count();
    let content = format!(
        "{cut}\n\n[message cut: the first {kept} of {total} characters kept; the rest was over the message size limit ({limit} bytes)]"
    );
    Cow::Owned(InboundMessage {
        content,
        ..msg.clone()
    })
}

/// Returns the longest prefix of `text` of at most `max` bytes that ends on a grapheme
/// boundary (an emoji sequence or a letter with its marks is never split).
fn cut_at_grapheme(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = 0;
    for (start, _) in text.grapheme_indices(true) {
        if start > max {
            break;
        }
        end = start;
    }
    // The grapheme starting at `end` may itself end past `max`: it is left out.
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(content: String) -> InboundMessage {
        InboundMessage {
            id: "tg:1:1".into(),
            bot: "default".into(),
            channel: "telegram".into(),
            chat_id: "42".into(),
            session_key: "telegram:42".into(),
            content,
            ..Default::default()
        }
    }

    #[test]
    fn a_message_that_fits_is_left_as_it_is() {
        let msg = message("你好 👋🏽".into());
        assert!(matches!(fit(&msg, 1024 * 1024), Cow::Borrowed(_)));
        assert!(matches!(fit(&msg, 0), Cow::Borrowed(_)), "no limit known");
    }

    #[test]
    fn a_two_megabyte_cjk_text_is_cut_to_fit_with_a_note_on_whole_graphemes() {
        let limit = 1024 * 1024;
        // 3-byte CJK characters with a 4-codepoint emoji family (25 bytes) every 100.
        let unit = format!("{}👨‍👩‍👧‍👦", "漢".repeat(100));
        let text = unit.repeat(2 * 1024 * 1024 / unit.len() + 1);
        let msg = message(text.clone());
        let fitted = fit(&msg, limit);
        assert!(fitted.encoded_len() + HEADROOM <= limit, "fits the bus");
        let (kept, note) = fitted.content.split_once("\n\n[message cut: ").unwrap();
        assert!(text.starts_with(kept) && kept.len() > limit / 2, "a prefix");
        assert!(
            kept.ends_with('漢') || kept.ends_with("👨‍👩‍👧‍👦"),
            "whole graphemes"
        );
        let total = text.chars().count();
        assert!(
            note.starts_with(&format!(
                "the first {} of {total} characters kept",
                kept.chars().count()
            )),
            "{note}"
        );
        assert_eq!(fitted.id, msg.id, "the same message");
    }

    #[test]
    fn cuts_never_split_a_grapheme() {
        assert_eq!(cut_at_grapheme("ab👍🏽c", 3), "ab");
        assert_eq!(cut_at_grapheme("ab👍🏽c", 10), "ab👍🏽");
        assert_eq!(cut_at_grapheme("ab", 10), "ab");
        assert_eq!(cut_at_grapheme("é", 1), "");
    }

    #[tokio::test]
    async fn a_panicking_handler_is_poison_and_an_error_is_retried() {
        let poison = guard(async {
            let offsets: Vec<usize> = Vec::new();
            #[allow(clippy::indexing_slicing)]
            Ok::<usize, anyhow::Error>(offsets[3])
        })
        .await;
        assert!(matches!(poison, Err(Failure::Poison(_))), "{poison:?}");
        let retry = guard(async { Err::<(), _>(anyhow::anyhow!("bus down")) }).await;
        assert!(matches!(retry, Err(Failure::Retry(_))));
        assert_eq!(guard(async { Ok::<_, anyhow::Error>(7) }).await.unwrap(), 7);
    }
}
