//! Bocha, Volcengine, Serper, Jina, Exa and Kagi against one fake of their documented APIs
//! on loopback (axum). Every expected text is what 0.3.5's `WebSearchTool` answered for
//! the same response bodies (its httpx client pointed at the same fakes).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::any;
use serde_json::{Value, json};

use super::search::{Provider, WebSearch};
use super::search_keyed::Backend;
use super::search_providers::Endpoints;
use super::tests::{run, serve};
use super::{SearchConfig, WebConfig};

/// One request the fake received: path and query, the key header, the JSON body.
#[derive(Debug, Clone, PartialEq)]
struct Request {
    target: String,
    key: String,
    body: Value,
}

#[derive(Clone, Default)]
struct Fake {
    seen: Arc<Mutex<Vec<Request>>>,
    /// A status to answer instead of results (0: answer results).
    fail: Arc<AtomicU16>,
}

impl Fake {
    fn last(&self) -> Request {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }
}

/// The body each provider's documented API answers, with Chinese, emoji and tags.
fn answer(provider: &str) -> Value {
    match provider {
        "bocha" => json!({"code": 200, "data": {"webPages": {"value": [
            {"name": "<b>上海</b>天气", "url": "https://tianqi.cn/上海", "summary": "今天   晴，🌞 25°C", "snippet": "x"},
            {"name": "北京", "url": "https://b.cn/", "summary": "", "snippet": "片段\n\n\n\n第二段"},
        ]}}}),
        "volc" => json!({"ResponseMetadata": {"RequestId": "r"}, "Result": {"WebResults": [
            {"Title": "火山引擎", "Url": "https://volc.cn/", "SiteName": "火山", "AuthInfoDes": "权威", "PublishTime": "2025-01-01", "Summary": "搜索 API 👩‍👩‍👧‍👦"},
            {"title": "第二", "url": "https://2.cn/", "snippet": "二"},
            "junk",
        ]}}),
        "serper" => json!({"organic": [
            {"title": "谷歌 Google", "link": "https://g.cn/", "snippet": "搜索引擎 🔍"},
            {"title": "无摘要", "link": "https://n.cn/"},
        ]}),
        "jina" => json!({"data": [
            {"title": "吉娜", "url": "https://j.cn/", "content": "长".repeat(613)},
            {"title": "二", "url": "https://j2.cn/", "content": "短"},
            {"title": "三", "url": "https://j3.cn/", "content": "c"},
        ]}),
        "exa" => json!({"results": [
            {"title": "Exa 搜索", "url": "https://e.cn/", "highlights": ["亮点一", "", "亮点二"]},
            {"title": "无亮点", "url": "https://e2.cn/", "highlights": [], "text": "正文".repeat(279)},
        ]}),
        "keenable" => json!({"results": [
            {"title": "开源 Keenable", "url": "https://ke.cn/", "snippet": "", "description": "描述 <b>粗</b>"},
            {"title": "二", "url": "https://ke2.cn/", "snippet": "片段"},
        ]}),
        "anysearch" => json!({"data": {"results": [
            {"title": "任意搜索", "url": "https://any.cn/", "content": "内容 🔎", "snippet": "s"},
            {"title": "二", "url": "https://any2.cn/", "content": "", "snippet": "摘录"},
            "junk",
        ]}}),
        _ => json!({"data": {"search": [
            {"title": "Kagi 卡吉", "url": "https://k.cn/", "snippet": "<i>片段</i> &amp; 更多 🇨🇳"},
        ]}}),
    }
}

async fn fake_server() -> (SocketAddr, Fake) {
    let fake = Fake::default();
    let handler = |State(fake): State<Fake>, uri: Uri, headers: HeaderMap, body: Bytes| async move {
        let key = ["authorization", "x-api-key"]
            .iter()
            .find_map(|h| headers.get(*h))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let target = uri.path_and_query().unwrap().to_string();
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        fake.seen.lock().unwrap().push(Request {
            target: target.clone(),
            key,
            body,
        });
        let fail = fake.fail.load(Ordering::SeqCst);
        if fail != 0 {
            let status = StatusCode::from_u16(fail).unwrap();
            return (status, "服务繁忙 busy").into_response();
        }
        let provider = target.trim_start_matches('/').split('/').next().unwrap();
        axum::Json(answer(provider)).into_response()
    };
    let router = Router::new()
        .fallback(any(handler))
        .with_state(fake.clone());
    (serve("127.0.0.1", router).await, fake)
}

fn searcher(name: &str, addr: SocketAddr) -> WebSearch {
    searcher_keyed(name, "k", addr)
}

fn searcher_keyed(name: &str, key: &str, addr: SocketAddr) -> WebSearch {
    let web = WebConfig {
        search: SearchConfig {
            provider: name.into(),
            api_key: key.into(),
            ..SearchConfig::default()
        },
        ..WebConfig::default()
    };
    let base = format!("http://{addr}");
    WebSearch::new(&web, |_| None).with_endpoints(Endpoints {
        bocha: format!("{base}/bocha/v1/web-search"),
        volcengine: format!("{base}/volc/search_api/web_search"),
        serper: format!("{base}/serper/search"),
        jina: format!("{base}/jina"),
        exa: format!("{base}/exa/search"),
        kagi: format!("{base}/kagi/api/v1/search"),
        keenable: format!("{base}/keenable/v1/search"),
        anysearch: format!("{base}/anysearch/v1/search"),
        ..Endpoints::default()
    })
}

#[tokio::test]
async fn bocha_and_volcengine_send_0_3_5s_requests_and_format_cjk_results_byte_equal() {
    let (addr, fake) = fake_server().await;
    let out = run(&searcher("bocha", addr), json!({"query": "上海 天气"})).await;
    assert_eq!(
        out.content,
        "Results for: 上海 天气\n\n1. 上海天气\n   https://tianqi.cn/上海\n   今天 晴，🌞 25°C\n2. 北京\n   https://b.cn/\n   片段\n\n第二段"
    );
    assert_eq!(
        fake.last(),
        Request {
            target: "/bocha/v1/web-search".into(),
            key: "Bearer k".into(),
            body: json!({"query": "上海 天气", "freshness": "noLimit", "summary": true, "count": 5}),
        }
    );
    let volc = searcher("volcengine", addr);
    let args = json!({"query": "火山 搜索", "count": 3, "timeRange": "OneWeek", "authLevel": "1", "queryRewrite": true});
    let out = run(&volc, args).await;
    assert_eq!(
        out.content,
        "Results for: 火山 搜索\n\n1. 火山引擎\n   https://volc.cn/\n   火山 | 权威 | 2025-01-01\n搜索 API 👩‍👩‍👧‍👦\n2. 第二\n   https://2.cn/\n   二"
    );
    assert_eq!(
        fake.last().body,
        json!({"Query": "火山 搜索", "SearchType": "web", "Count": 3, "NeedSummary": true, "TimeRange": "OneWeek", "Filter": {"AuthInfoLevel": 1}, "QueryControl": {"QueryRewrite": true}})
    );
    let sent = fake.seen.lock().unwrap().len();
    let bad_range = run(&volc, json!({"query": "x", "timeRange": "上周"})).await;
    assert!(bad_range.is_error);
    assert_eq!(
        bad_range.content,
        "Error: timeRange must be OneDay, OneWeek, OneMonth, OneYear, or YYYY-MM-DD..YYYY-MM-DD"
    );
    let bad_level = run(&volc, json!({"query": "x", "authLevel": 2})).await;
    assert_eq!(bad_level.content, "Error: authLevel must be 0 or 1");
    assert_eq!(
        fake.seen.lock().unwrap().len(),
        sent,
        "bad filters are never sent"
    );
}

#[tokio::test]
async fn serper_jina_exa_and_kagi_read_0_3_5s_fields_with_cjk_results() {
    let (addr, fake) = fake_server().await;
    let out = run(&searcher("serper", addr), json!({"query": "谷歌"})).await;
    assert_eq!(
        out.content,
        "Results for: 谷歌\n\n1. 谷歌 Google\n   https://g.cn/\n   搜索引擎 🔍\n2. 无摘要\n   https://n.cn/"
    );
    assert_eq!(fake.last().key, "k");
    assert_eq!(fake.last().body, json!({"q": "谷歌", "num": 5}));
    let out = run(
        &searcher("jina", addr),
        json!({"query": "吉娜 a/b?", "count": 2}),
    )
    .await;
    assert_eq!(
        out.content,
        format!(
            "Results for: 吉娜 a/b?\n\n1. 吉娜\n   https://j.cn/\n   {}\n2. 二\n   https://j2.cn/\n   短",
            "长".repeat(500)
        )
    );
    assert_eq!(fake.last().target, "/jina/%E5%90%89%E5%A8%9C%20a%2Fb%3F");
    assert_eq!(fake.last().key, "Bearer k");
    let out = run(&searcher("exa", addr), json!({"query": "Exa 搜索"})).await;
    assert_eq!(
        out.content,
        format!(
            "Results for: Exa 搜索\n\n1. Exa 搜索\n   https://e.cn/\n   亮点一\n亮点二\n2. 无亮点\n   https://e2.cn/\n   {}",
            "正文".repeat(250)
        )
    );
    assert_eq!(
        fake.last().body,
        json!({"query": "Exa 搜索", "numResults": 5, "contents": {"highlights": true}})
    );
    let out = run(&searcher("kagi", addr), json!({"query": "卡吉"})).await;
    assert_eq!(
        out.content,
        "Results for: 卡吉\n\n1. Kagi 卡吉\n   https://k.cn/\n   片段 & 更多 🇨🇳"
    );
    assert_eq!(fake.last().body, json!({"query": "卡吉", "limit": 5}));
}

#[tokio::test]
async fn failed_keyed_searches_answer_0_3_5s_error_texts() {
    let (addr, fake) = fake_server().await;
    let url = |path: &str| format!("http://{addr}{path}");
    let more =
        "\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/";
    let cases = [
        (
            "bocha",
            500,
            "Error: Bocha search HTTP 500: 服务繁忙 busy".to_string(),
        ),
        (
            "bocha",
            429,
            "Error: Bocha search rate-limited (HTTP 429). Wait and retry.".into(),
        ),
        (
            "serper",
            503,
            format!(
                "Error: Serper search failed (503): Server error '503 Service Unavailable' for url '{}'{more}503",
                url("/serper/search")
            ),
        ),
        (
            "exa",
            429,
            "Error: Exa search rate limited. Try again later or reduce search frequency.".into(),
        ),
        (
            "volcengine",
            500,
            format!(
                "Error: Volcengine search failed (500): Server error '500 Internal Server Error' for url '{}'{more}500",
                url("/volc/search_api/web_search")
            ),
        ),
        (
            "kagi",
            401,
            format!(
                "Error: Client error '401 Unauthorized' for url '{}'{more}401",
                url("/kagi/api/v1/search")
            ),
        ),
    ];
    let cases = cases.into_iter().chain([
        (
            "keenable",
            429,
            "Error: Keenable search rate limited. Try again later or reduce search frequency.".into(),
        ),
        (
            "anysearch",
            502,
            format!("Error: AnySearch search failed (502): Server error '502 Bad Gateway' for url '{}'{more}502", url("/anysearch/v1/search")),
        ),
    ]);
    for (name, status, expected) in cases {
        fake.fail.store(status, Ordering::SeqCst);
        let out = run(&searcher(name, addr), json!({"query": "错"})).await;
        assert!(out.is_error, "{name}");
        assert_eq!(out.content, expected, "{name}");
    }
}

#[test]
fn keyed_providers_take_the_key_from_config_or_0_3_5s_variables() {
    let config = |name: &str, key: &str| SearchConfig {
        provider: name.into(),
        api_key: key.into(),
        ..SearchConfig::default()
    };
    let none = |_: &str| None;
    assert_eq!(
        Provider::resolve(&config("bocha", "配置"), none),
        Provider::Keyed {
            backend: Backend::Bocha,
            api_key: "配置".into()
        }
    );
    let web_key = |k: &str| (k == "WEB_SEARCH_API_KEY").then(|| "w".to_string());
    assert_eq!(
        Provider::resolve(&config("Volcengine", ""), web_key),
        Provider::Keyed {
            backend: Backend::Volcengine,
            api_key: "w".into()
        }
    );
    let Provider::Unavailable { error } = Provider::resolve(&config("volcengine", " "), none)
    else {
        panic!("a named provider without a key is an error");
    };
    assert_eq!(
        error,
        "Error: web_search provider 'volcengine' has no API key: set tools.web.search.apiKey or \
         VOLCENGINE_SEARCH_API_KEY or WEB_SEARCH_API_KEY"
    );
    for (name, var) in [
        ("serper", "SERPER_API_KEY"),
        ("jina", "JINA_API_KEY"),
        ("exa", "EXA_API_KEY"),
        ("kagi", "KAGI_API_KEY"),
    ] {
        let from_env =
            Provider::resolve(&config(name, ""), |k| (k == var).then(|| "e".to_string()));
        assert!(
            matches!(from_env, Provider::Keyed { ref api_key, .. } if api_key == "e"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn keenable_and_anysearch_search_with_or_without_a_key_as_0_3_5() {
    let (addr, fake) = fake_server().await;
    let keyless = searcher_keyed("keenable", "", addr);
    assert_eq!(
        keyless.provider(),
        &Provider::Keyed {
            backend: Backend::Keenable,
            api_key: String::new()
        }
    );
    let out = run(&keyless, json!({"query": "开源 搜索", "count": 1})).await;
    assert_eq!(
        out.content,
        "Results for: 开源 搜索\n\n1. 开源 Keenable\n   https://ke.cn/\n   描述 粗"
    );
    assert_eq!(
        fake.last(),
        Request {
            target: "/keenable/v1/search/public".into(),
            key: String::new(),
            body: json!({"query": "开源 搜索"}),
        }
    );
    let out = run(&searcher("keenable", addr), json!({"query": "开源"})).await;
    assert_eq!(
        out.content,
        "Results for: 开源\n\n1. 开源 Keenable\n   https://ke.cn/\n   描述 粗\n2. 二\n   https://ke2.cn/\n   片段"
    );
    assert_eq!(
        (fake.last().target.as_str(), fake.last().key.as_str()),
        ("/keenable/v1/search", "k")
    );
    let any = "Results for: 任意\n\n1. 任意搜索\n   https://any.cn/\n   内容 🔎\n2. 二\n   https://any2.cn/\n   摘录";
    let out = run(
        &searcher_keyed("anysearch", "", addr),
        json!({"query": "任意"}),
    )
    .await;
    assert_eq!(out.content, any);
    assert_eq!(fake.last().key, "");
    assert_eq!(fake.last().body, json!({"query": "任意", "max_results": 5}));
    let out = run(
        &searcher("anysearch", addr),
        json!({"query": "任意", "count": 2}),
    )
    .await;
    assert_eq!(out.content, any);
    assert_eq!(fake.last().key, "Bearer k");
}
