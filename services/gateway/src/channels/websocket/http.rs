//! The channel's HTTP side: the WebSocket upgrade and the web chat page on `path`, the page's
//! script and style, and the history of a chat (`GET {path}/history?chat_id=…`, the owner's
//! only), all behind the token (`?token=` or `Authorization: Bearer`) and `allowFrom` (on
//! `client_id`); and the token issue route (`GET {tokenIssuePath}?client_id=…`, behind the
//! issue secret), as upstream.
//!
//! A token is either a shared secret (`token`; `tokenIssueSecret` when no tokens are issued),
//! whose holder names any `client_id`, or an issued one, bound to the `client_id` it was
//! issued for: naming another is refused (403), naming none takes its own.

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

use super::access::TOKEN_PREFIX;
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
        .route(&format!("{prefix}/history"), get(history));
    let issue_path = server.ch.cfg.normalized_issue_path();
    let router = if issue_path.is_empty() {
        router
    } else {
        router.route(&issue_path, get(issue))
    };
    let router = router.with_state(server);
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

type Refusal = (StatusCode, &'static str);

impl Server {
    /// Refuses a request without a valid token (401), from a `client_id` outside `allowFrom`
    /// or other than the one its issued token is bound to (403). An empty `client_id` becomes
    /// the token's client, else (`mint`) a fresh `anon-…` one.
    async fn authorize(&self, p: &mut Params, mint: bool) -> Result<(), Refusal> {
        let cfg = &self.ch.cfg;
        let presented = p.token.as_deref().unwrap_or_default();
        // Every secret is compared, so the timing says nothing about which one matched.
        let shared = cfg.secrets().iter().fold(false, |ok, s| {
            crate::api::constant_time_eq(presented.as_bytes(), s.as_bytes()) | ok
        });
        let issued = if shared || !cfg.issues_tokens() || !presented.starts_with(TOKEN_PREFIX) {
            None
        } else {
            self.ch.access.client_of(presented).await.map_err(|e| {
                tracing::warn!(error = %e, "websocket issued tokens unreadable");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service unavailable, try again",
                )
            })?
        };
        if !shared && issued.is_none() && cfg.requires_token() {
            tracing::warn!(client_id = %p.client_id, "websocket request refused (missing or wrong token)");
            return Err((
                StatusCode::UNAUTHORIZED,
                "Unauthorized: missing or wrong token",
            ));
        }
        match issued {
            Some(bound) if p.client_id.is_empty() => p.client_id = bound,
            Some(bound) if bound != p.client_id => {
                tracing::warn!(client_id = %p.client_id, "websocket request refused (token issued to another client_id)");
                return Err((
                    StatusCode::FORBIDDEN,
                    "Forbidden: the token was issued to another client_id",
                ));
            }
            _ => {}
        }
        if p.client_id.is_empty() && mint {
            p.client_id = anon_client();
        }
        self.allowed(&p.client_id)
    }

    /// Refuses a `client_id` outside `allowFrom` (403), as upstream.
    fn allowed(&self, client_id: &str) -> Result<(), Refusal> {
        if !acl::allowed_by_list(&self.ch.settings.allow_from, client_id) {
            tracing::warn!(client_id = %client_id, "websocket request refused (client_id not in allowFrom)");
            return Err((
                StatusCode::FORBIDDEN,
                "Forbidden: client_id not in allowFrom",
            ));
        }
        Ok(())
    }
}

fn anon_client() -> String {
    format!("anon-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
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
    if let Err(refused) = server.authorize(&mut p, true).await {
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
    let mut p = params(query.as_deref(), &headers);
    if let Err(refused) = server.authorize(&mut p, false).await {
        return refused.into_response();
    }
    let Some(chat) = p.chat_id.clone().filter(|c| protocol::is_valid_id(c)) else {
        return (
            StatusCode::BAD_REQUEST,
            "chat_id: a valid chat id is required",
        )
            .into_response();
    };
    match server.ch.access.owner(&chat).await {
        // Nobody's yet: nothing to read (the first attach claims it).
        Ok(None) => return axum::Json(json!({"chat_id": chat, "entries": []})).into_response(),
        Ok(Some(owner)) if owner == p.client_id => {}
        Ok(Some(_)) => {
            tracing::warn!(client_id = %p.client_id, chat_id = %chat, "websocket history of another client's chat refused");
            return (
                StatusCode::FORBIDDEN,
                "Forbidden: this chat belongs to another client",
            )
                .into_response();
        }
        Err(e) => {
            tracing::warn!(chat_id = %chat, error = %e, "websocket chat owner unreadable");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "history unavailable, try again",
            )
                .into_response();
        }
    }
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

/// `GET {tokenIssuePath}?client_id=…` with the issue secret (`Authorization: Bearer` or
/// `X-Nanobot-Auth`): `{"token","expires_in","client_id"}`, a token bound to that `client_id`
/// (a fresh `anon-…` one when none is named), as upstream plus the binding.
async fn issue(
    State(server): State<Server>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let cfg = &server.ch.cfg;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let presented = header(header::AUTHORIZATION.as_str())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| header("x-nanobot-auth"))
        .map(str::trim)
        .unwrap_or_default();
    let secret = cfg.issue_secret();
    if secret.is_empty() || !crate::api::constant_time_eq(presented.as_bytes(), secret.as_bytes()) {
        tracing::warn!("websocket token request refused (missing or wrong issue secret)");
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    }
    let mut client_id = params(query.as_deref(), &HeaderMap::new()).client_id;
    if client_id.is_empty() {
        client_id = anon_client();
    }
    if let Err(refused) = server.allowed(&client_id) {
        return refused.into_response();
    }
    let token = match server.ch.access.issue(&client_id, cfg.token_ttl_s).await {
        Ok(token) => token,
        Err(e) => {
            tracing::warn!(error = %e, "websocket token not issued");
            let detail = "token not issued, try again";
            return (StatusCode::SERVICE_UNAVAILABLE, detail).into_response();
        }
    };
    tracing::info!(client_id = %client_id, ttl_s = cfg.token_ttl_s, "websocket token issued");
    let body = json!({"token": token, "expires_in": cfg.token_ttl_s, "client_id": client_id});
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
