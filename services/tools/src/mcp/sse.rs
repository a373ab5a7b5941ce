//! The legacy MCP HTTP+SSE transport (protocol 2024-11-05), which rmcp no longer ships: a
//! `GET` of the server's `/sse` URL opens an event stream whose first `endpoint` event names
//! where to `POST` JSON-RPC messages; the server's messages (responses included) arrive as
//! `message` events on the stream. The endpoint must be on the stream's origin (as the MCP
//! Python SDK requires), so the client's pinned, vetted addresses cover both.
//!
//! When the stream ends (the server went away), [`Transport::receive`] returns `None`, which
//! closes the rmcp session; the [`Server`](super::Server) reopens it on the next call.

use std::time::Duration;

use futures::StreamExt as _;
use reqwest::header::{ACCEPT, HeaderValue};
use reqwest::{StatusCode, Url};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long one `POST` of a message may take (the answer comes on the stream).
const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Server messages buffered before the reader waits for the session to take them.
const BUFFER: usize = 64;

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// The configured URL does not parse.
    #[error("invalid sse url: {0}")]
    Url(#[from] url::ParseError),
    /// The request could not be sent or its body read (the URL left out: it may hold a
    /// token).
    #[error("sse request failed: {0}")]
    Http(reqwest::Error),
    /// The server answered with an error status.
    #[error("sse server answered HTTP {0}")]
    Status(StatusCode),
    /// The stream broke or ended before naming the message endpoint.
    #[error("sse stream ended before the endpoint event{0}")]
    NoEndpoint(String),
    /// The endpoint is on another origin than the stream.
    #[error("sse endpoint origin does not match the server's ({0})")]
    Origin(String),
}

/// One open SSE session: the stream reader and where messages are posted.
#[derive(Debug)]
pub struct SseTransport {
    client: reqwest::Client,
    endpoint: Url,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: JoinHandle<()>,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub async fn connect(client: reqwest::Client, url: &str) -> Result<Self, SseError> {
        let url = Url::parse(url)?;
        let response = client
            .get(url.clone())
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(SseError::Status(response.status()));
        }
        let body = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| e.without_url().to_string()));
        let mut events = Box::pin(nanobot_runtime::sse::events(body));
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event == "endpoint" => {
                    break url.join(event.data.trim())?;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(SseError::NoEndpoint(format!(": {e}"))),
                None => return Err(SseError::NoEndpoint(String::new())),
            }
        };
        if endpoint.origin() != url.origin() {
            return Err(SseError::Origin(endpoint.origin().ascii_serialization()));
        }
        let (tx, incoming) = mpsc::channel(BUFFER);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::debug!(error = %e, "mcp sse stream broke");
                        break;
                    }
                };
                if event.event != "message" {
                    continue;
                }
                match serde_json::from_str::<ServerJsonRpcMessage>(&event.data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "ignoring malformed mcp sse message"),
                }
            }
        });
        Ok(Self {
            client,
            endpoint,
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let post = self
            .client
            .post(self.endpoint.clone())
            .json(&item)
            .timeout(POST_TIMEOUT);
        async move {
            let response = post.send().await?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Status(response.status()))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        Ok(())
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl From<reqwest::Error> for SseError {
    fn from(error: reqwest::Error) -> Self {
        Self::Http(error.without_url())
    }
}
