//! The channel's HTTP side: the WebSocket upgrade and the web chat page on `path`, the page's
//! script and style, and the history of a chat (`GET {path}/history?chat_id=…`), all behind
//! the token (`?token=` or `Authorization: Bearer`; `token` or upstream's `tokenIssueSecret`)
//! and `allowFrom` (on `client_id`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::log::{MAX_ENTRIES, is_entry_id};
use super::{WebSocketChannel, conn, protocol};
use crate::channels::{Inbound, acl};

/// How long a request's headers may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `client_id`, as upstream (longer ones are cut).
const MAX_CLIENT_ID: usize = 128;
/// The page's resources may only come from the gateway itself; no inline script runs.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

static PAGE: &str = include_str!("page/index.html");
static SCRIPT: &str = include_str!("page/app.js");
static STYLE: &str = include_str!("page/style.css");

#[derive(Clone)]
struct Server {
    ch: Arc<WebSocketChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
    page: Arc<str>,
}

/// Serves the channel on `listener` until `cancel`.
pub(super) async fn serve(
    ch: Arc<WebSocketChannel>,
    listener: tokio::net::TcpListener,
    inbound: Inbound,
    cancel: CancellationToken,
) {
    let base = ch.cfg.normalized_path();
    let prefix = if base == "/" {
        String::new()
    } else {
        base.clone()
    };
    let server = Server {
        ch,
        inbound,
        cancel: cancel.clone(),
        page: PAGE.replace("{{BASE}}", &prefix).into(),
    };
    let router = Router::new()
        .route(&base, get(root))
        .route(&format!("{prefix}/app.js"), get(script))
        .route(&format!("{prefix}/style.css"), get(style))
        .route(&format!("{prefix}/history"), get(history))
        .with_state(server);
    crate::api::serve(listener, router, READ_TIMEOUT, cancel).await;
}

/// The query parameters the channel reads.
#[derive(Debug, Default)]
struct Params {
    token: Option<String>,
    client_id: String,
    chat_id: Option<String>,
    after: Option<String>,
}

fn params(query: Option<&str>, headers: &HeaderMap) -> Params {
    let mut p = Params::default();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "token" => p.token = Some(value.into_owned()),
            "client_id" => p.client_id = value.trim().chars().take(MAX_CLIENT_ID).collect(),
            "chat_id" => p.chat_id = Some(value.into_owned()),
            "after" => p.after = Some(value.into_owned()),
            _ => {}
        }
    }
    if p.token.is_none() {
        p.token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_string());
    }
    p
}

impl Server {
    /// Refuses a request without the token (401) or from a `client_id` outside `allowFrom`
    /// (403), as upstream.
    fn authorize(&self, p: &Params) -> Result<(), (StatusCode, &'static str)> {
        let secrets = self.ch.cfg.secrets();
        let presented = p.token.as_deref().unwrap_or_default();
        let token_ok = if secrets.is_empty() {
            !self.ch.cfg.websocket_requires_token
        } else {
            // Every secret is compared, so the timing says nothing about which one matched.
            secrets.iter().fold(false, |ok, s| {
                crate::api::constant_time_eq(presented.as_bytes(), s.as_bytes()) | ok
            })
        };
        if !token_ok {
            tracing::warn!(client_id = %p.client_id, "websocket request refused (missing or wrong token)");
            return Err((
                StatusCode::UNAUTHORIZED,
                "Unauthorized: missing or wrong token",
            ));
        }
        if !acl::allowed_by_list(&self.ch.settings.allow_from, &p.client_id) {
            tracing::warn!(client_id = %p.client_id, "websocket request refused (client_id not in allowFrom)");
            return Err((
                StatusCode::FORBIDDEN,
                "Forbidden: client_id not in allowFrom",
            ));
        }
        Ok(())
    }
}

/// The upgrade (token and `allowFrom` checked first), or the page.
async fn root(
    State(server): State<Server>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return page(&server);
    };
    let mut p = params(query.as_deref(), &headers);
    if p.client_id.is_empty() {
        p.client_id = format!("anon-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    }
    if let Err(refused) = server.authorize(&p) {
        return refused.into_response();
    }
    let Server {
        ch,
        inbound,
        cancel,
        ..
    } = server;
    upgrade
        .max_message_size(ch.cfg.max_message_bytes)
        .on_upgrade(move |socket| conn::run(ch, inbound, socket, p.client_id, cancel))
}

fn page(server: &Server) -> Response {
    let html = server.page.to_string();
    with_type(html, "text/html; charset=utf-8")
}

async fn script() -> Response {
    with_type(SCRIPT.to_string(), "text/javascript; charset=utf-8")
}

async fn style() -> Response {
    with_type(STYLE.to_string(), "text/css; charset=utf-8")
}

fn with_type(body: String, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET {path}/history?chat_id=…[&after=…]`: the chat's log entries as the frames the socket
/// sends (`{"chat_id", "entries": [...]}`), oldest first.
async fn history(
    State(server): State<Server>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = params(query.as_deref(), &headers);
    if let Err(refused) = server.authorize(&p) {
        return refused.into_response();
    }
    let Some(chat) = p.chat_id.filter(|c| protocol::is_valid_id(c)) else {
        return (
            StatusCode::BAD_REQUEST,
            "chat_id: a valid chat id is required",
        )
            .into_response();
    };
    let mut cursor = p.after.unwrap_or_else(|| "0-0".into());
    if !is_entry_id(&cursor) {
        return (StatusCode::BAD_REQUEST, "after: an entry id is required").into_response();
    }
    let mut entries = Vec::new();
    while entries.len() < MAX_ENTRIES {
        let page = match server.ch.log.after(&chat, &cursor).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(chat_id = %chat, error = %e, "websocket chat history unreadable");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "history unavailable, try again",
                )
                    .into_response();
            }
        };
        let Some(last) = page.last() else { break };
        cursor = last.id.clone();
        entries.extend(page.iter().map(|e| protocol::entry(&chat, e)));
    }
    axum::Json(json!({"chat_id": chat, "entries": entries})).into_response()
}
