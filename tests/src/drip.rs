//! Bodies sent a few bytes at a time, as a server behind a slow network sends them: a Chinese
//! character or an emoji then spans several reads of the client, and a JSON document or an SSE
//! event dozens. The scripted LLM ([`crate::scripted_llm::Builder::drip`]) and the Telegram
//! fake ([`crate::telegram_fake::TelegramFake::set_drip`]) answer through it.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse as _, Response};
use futures::StreamExt as _;

/// Cuts `bytes` into pieces of 1, 2 and 3 bytes in turn, so every kind of boundary inside a
/// UTF-8 character (and between characters) is cut somewhere.
pub fn pieces(bytes: &[u8]) -> Vec<Bytes> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for size in [1, 2, 3].into_iter().cycle() {
        if start >= bytes.len() {
            break;
        }
        let end = (start + size).min(bytes.len());
        pieces.push(Bytes::copy_from_slice(&bytes[start..end]));
        start = end;
    }
    pieces
}

/// Answers `bytes` (of `content_type`) in the [`pieces`], a millisecond apart; the listener
/// must set `TCP_NODELAY` for each piece to leave as its own segment.
pub fn response(bytes: &[u8], content_type: &'static str) -> Response {
    let stream = futures::stream::iter(pieces(bytes)).then(|piece| async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok::<_, std::convert::Infallible>(piece)
    });
    let mut response = Body::from_stream(stream).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_a_cjk_and_emoji_text_inside_characters_and_rejoin_to_it() {
        let text = "你好 🐈 👩\u{200d}👩\u{200d}👧\u{200d}👦 e\u{301} مرحبا";
        let pieces = pieces(text.as_bytes());
        let sizes: Vec<usize> = pieces.iter().map(Bytes::len).take(4).collect();
        assert_eq!(sizes, [1, 2, 3, 1]);
        assert!(
            pieces.iter().any(|p| std::str::from_utf8(p).is_err()),
            "some piece holds part of a character"
        );
        assert_eq!(pieces.concat(), text.as_bytes());
    }
}
