//! `channels.telegram.proxy`: every Bot API call goes through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ALICE, telegram_fleet};
use crate::scripted_llm::Reply;
use crate::telegram_fake::{Incoming, TgUser};

/// What the proxy saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    /// The Bot API method (last path segment).
    method: String,
    /// The `Proxy-Authorization` header.
    auth: Option<String>,
}

/// A plain HTTP forward proxy on 127.0.0.1 (no CONNECT: the Bot API fake is http), recording
/// each request and relaying it to its absolute-form target.
#[derive(Clone)]
struct ForwardProxy {
    seen: Arc<Mutex<Vec<Seen>>>,
    http: reqwest::Client,
}

impl ForwardProxy {
    async fn start() -> (Self, SocketAddr) {
        let proxy = Self {
            seen: Arc::default(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(relay).with_state(proxy.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (proxy, addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn saw(&self, method: &str) -> bool {
        // teloxide spells methods `GetUpdates`; Telegram reads them case-insensitively.
        self.seen()
            .iter()
            .any(|s| s.method.eq_ignore_ascii_case(method))
    }
}

async fn relay(
    State(proxy): State<ForwardProxy>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.authority().is_none() {
        // Not proxy-style (origin-form): the client went around the proxy.
        return StatusCode::BAD_REQUEST.into_response();
    }
    proxy.seen.lock().unwrap().push(Seen {
        method: uri
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string(),
        auth: headers
            .get(header::PROXY_AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    });
    let mut request = proxy.http.request(method, uri.to_string()).body(body);
    if let Some(kind) = headers.get(header::CONTENT_TYPE) {
        request = request.header(header::CONTENT_TYPE, kind);
    }
    match request.send().await {
        Ok(answer) => {
            let status = answer.status();
            let kind = answer.headers().get(header::CONTENT_TYPE).cloned();
            let bytes = answer.bytes().await.unwrap_or_default();
            let mut response = (status, bytes).into_response();
            if let Some(kind) = kind {
                response.headers_mut().insert(header::CONTENT_TYPE, kind);
            }
            response
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

#[tokio::test]
async fn with_a_proxy_set_every_bot_api_call_goes_through_it_and_its_password_is_never_logged() {
    let (proxy, addr) = ForwardProxy::start().await;
    let url = format!("http://tg-user:pr0xy-pa55@{addr}");
    let (mut fleet, _fake, bot) = telegram_fleet(json!({"proxy": url})).await;
    fleet.llm.push(Reply::text("through the proxy"));
    bot.inject(Incoming::text_from(&TgUser::new(ALICE, "alice"), "hi"));
    bot.wait_for_call("sendMessage", |c| c.text() == Some("through the proxy"))
        .await
        .unwrap();

    // The fake answered every call the proxy relayed, and the proxy saw them all.
    let relayed = proxy.seen();
    for method in ["getMe", "getUpdates", "sendMessage"] {
        assert!(proxy.saw(method), "{method} not relayed: {relayed:#?}");
    }
    let direct = bot.calls().len();
    assert!(
        relayed.len() >= direct,
        "every call the fake recorded came through the proxy ({} relayed, {direct} recorded)",
        relayed.len()
    );
    // reqwest sends the URL's credentials as Basic proxy authorisation.
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "tg-user:pr0xy-pa55"
        )
    );
    assert!(
        relayed.iter().all(|s| s.auth.as_deref() == Some(&basic)),
        "{relayed:#?}"
    );
    let logs = fleet.service("gateway").logs();
    // Written before the first poll, so long before the reply.
    assert!(logs.contains("telegram channel started"), "{logs}");
    assert!(
        !logs.contains("pr0xy-pa55"),
        "the proxy password was logged"
    );
}
