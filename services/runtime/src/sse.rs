//! Server-sent events read from an HTTP body, the one SSE reader of the fleet (LLM provider
//! streams, MCP's SSE transport).
//!
//! A network chunk is not a unit of text: a provider may split a Chinese character or an emoji
//! across two reads, an event across many. Bytes become text through a streaming UTF-8 decoder
//! (`encoding_rs`), which holds an incomplete character until its last byte arrives and turns
//! only truly invalid bytes into U+FFFD (as Python's `errors="replace"`); the text becomes
//! events through `eventsource-stream`, which follows the WHATWG spec (`\n`, `\r\n` or `\r`
//! line ends, several `data:` lines joined with `\n`, comments ignored, one leading space after
//! the colon removed, an event dispatched at its blank line).
//!
//! ```
//! use futures::StreamExt as _;
//! let chunks: Vec<Result<Vec<u8>, std::io::Error>> = "data: 你好\n\n"
//!     .bytes()
//!     .map(|b| Ok(vec![b]))
//!     .collect();
//! let events: Vec<_> = futures::executor::block_on(
//!     nanobot_runtime::sse::events(futures::stream::iter(chunks)).collect(),
//! );
//! assert_eq!(events[0].as_ref().unwrap().data, "你好");
//! ```

use std::fmt::Display;

use futures::{Stream, StreamExt as _};

use crate::utf8::Utf8Decoder;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `message` when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` seen on the stream.
    pub id: String,
}

/// Why an event stream ended early.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// The body could not be read (the connection broke, a timeout).
    #[error("event stream broke: {0}")]
    Transport(String),
    /// The text is not an event stream.
    #[error("malformed event stream: {0}")]
    Parse(String),
}

/// Returns the events of an SSE body given as a stream of byte chunks of any size.
pub fn events<S, B, E>(body: S) -> impl Stream<Item = Result<Event, SseError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send,
    B: AsRef<[u8]> + Send,
    E: Display + Send,
{
    let text = sse_text(body.map(|chunk| chunk.map_err(|e| e.to_string())));
    eventsource_stream::EventStream::new(text).map(|event| match event {
        Ok(e) => Ok(Event {
            event: e.event,
            data: e.data,
            id: e.id,
        }),
        Err(eventsource_stream::EventStreamError::Transport(e)) => Err(SseError::Transport(e)),
        Err(e) => Err(SseError::Parse(e.to_string())),
    })
}

/// Decodes a byte stream as UTF-8 text, each item the characters completed so far. A body
/// that ends in a bare `\r` gets its `\n`: the parser would otherwise wait for one to tell
/// `\r` from `\r\n`, and drop the last event.
fn sse_text<S, B>(body: S) -> impl Stream<Item = Result<String, String>> + Send
where
    S: Stream<Item = Result<B, String>> + Send,
    B: AsRef<[u8]> + Send,
{
    let state = (Box::pin(body), Utf8Decoder::default(), false, false);
    futures::stream::unfold(state, |(mut body, mut decoder, mut cr, done)| async move {
        if done {
            return None;
        }
        let (item, done) = match body.next().await {
            Some(Ok(bytes)) => {
                let text = decoder.feed(bytes.as_ref());
                cr = text.ends_with('\r') || (cr && text.is_empty());
                (Ok(text), false)
            }
            Some(Err(e)) => (Err(e), true),
            None => {
                let mut rest = decoder.finish();
                if cr && rest.is_empty() {
                    rest.push('\n');
                }
                (Ok(rest), true)
            }
        };
        Some((item, (body, decoder, cr, done)))
    })
}

#[cfg(test)]
mod tests;
