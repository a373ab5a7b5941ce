//! The HTTP surface: `{base}/bot{token}/{method}` with parameters in the query string, a JSON,
//! form-urlencoded or multipart body; and `{base}/file/bot{token}/{file_path}` downloads.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::methods::{self, Params};
use super::poll;
use super::state::Shared;
use super::{ApiError, Call, Upload};

/// Largest request body the fake reads (Telegram's upload limit for bots is 50 MB).
const MAX_BODY: usize = 50 * 1024 * 1024;

pub(super) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = percent_decode(request.uri().path());
    let segments: Vec<&str> = path.trim_start_matches('/').splitn(3, '/').collect();
    match segments.as_slice() {
        ["file", bot, file_path] if bot.starts_with("bot") => {
            download(&shared, &bot[3..], file_path)
        }
        [bot, method] if bot.starts_with("bot") && !method.is_empty() => {
            let (token, method) = (bot[3..].to_string(), method.to_string());
            api_call(&shared, token, method, request).await
        }
        _ => ApiError::new(404, "Not Found").into_response(),
    }
}

async fn api_call(
    shared: &Arc<Shared>,
    token: String,
    method: String,
    request: Request,
) -> Response {
    let at = Instant::now();
    let (params, uploads) = match read_params(request).await {
        Ok(read) => read,
        Err(e) => return e.into_response(),
    };
    let result = answer(shared, &token, &method, &params, &uploads).await;
    let drip = method.eq_ignore_ascii_case("getUpdates")
        && shared.drip.load(std::sync::atomic::Ordering::SeqCst);
    if result.is_ok() && method.eq_ignore_ascii_case("setWebhook") {
        let queued = shared
            .bots()
            .get(&token)
            .map(|b| b.queued())
            .unwrap_or_default();
        for (update_id, update) in queued {
            poll::deliver(shared, &token, update_id, update);
        }
    }
    shared.record(Call {
        token,
        method,
        params: Value::Object(params.0),
        uploads,
        at,
        result: result.clone(),
    });
    match result {
        Ok(value) if drip => {
            let body = json!({"ok": true, "result": value}).to_string();
            crate::drip::response(body.as_bytes(), "application/json")
        }
        Ok(value) => Json(json!({"ok": true, "result": value})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn answer(
    shared: &Arc<Shared>,
    token: &str,
    method: &str,
    params: &Params,
    uploads: &[Upload],
) -> Result<Value, ApiError> {
    {
        let mut bots = shared.bots();
        let bot = bots.get_mut(token).ok_or_else(ApiError::unauthorized)?;
        if let Some(failure) = bot.take_failure(method) {
            return Err(failure);
        }
        if !method.eq_ignore_ascii_case("getUpdates") {
            return methods::call(bot, method, params, uploads)
                .unwrap_or_else(|| Err(ApiError::new(404, "Not Found: method not found")));
        }
    }
    poll::get_updates(shared, token, params).await
}

fn download(shared: &Shared, token: &str, file_path: &str) -> Response {
    let bots = shared.bots();
    let Some(bot) = bots.get(token) else {
        return ApiError::unauthorized().into_response();
    };
    match bot.file_by_path(file_path) {
        Some(file) => (
            [(header::CONTENT_TYPE, file.meta.mime.clone())],
            file.bytes.clone(),
        )
            .into_response(),
        None => ApiError::new(404, "Not Found").into_response(),
    }
}

/// Decodes `%XX` escapes (clients escape the `/` of a `file_path` and may escape the `:` of
/// a token).
fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the call's parameters: query string first, then the body by its content type.
async fn read_params(request: Request) -> Result<(Params, Vec<Upload>), ApiError> {
    let mut params = Map::new();
    if let Some(query) = request.uri().query() {
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            params.insert(k.to_string(), coerce(&k, &v));
        }
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut uploads = Vec::new();
    if content_type.starts_with("multipart/form-data") {
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| ApiError::bad_request(&format!("bad multipart body: {e}")))?;
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(&format!("bad multipart body: {e}")))?
        {
            let name = field.name().unwrap_or_default().to_string();
            let file_name = field.file_name().map(str::to_string);
            let field_type = field.content_type().map(str::to_string);
            let bytes = field
                .bytes()
                .await
                .map_err(|e| ApiError::bad_request(&format!("bad multipart body: {e}")))?;
            match file_name {
                Some(file_name) => uploads.push(Upload {
                    field: name,
                    file_name: Some(file_name),
                    content_type: field_type,
                    bytes,
                }),
                None => {
                    let value = coerce(&name, &String::from_utf8_lossy(&bytes));
                    params.insert(name, value);
                }
            }
        }
        // teloxide (like the Bot API docs) names a file part by a random id and passes
        // `field=attach://id`: record the upload under the field it fills.
        for (key, value) in &params {
            let Some(id) = value.as_str().and_then(|v| v.strip_prefix("attach://")) else {
                continue;
            };
            for upload in uploads.iter_mut().filter(|u| u.field == id) {
                upload.field = key.clone();
            }
        }
        return Ok((Params(params), uploads));
    }
    let body: Bytes = axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|_| ApiError::new(413, "Request Entity Too Large"))?;
    if content_type.starts_with("application/json") && !body.is_empty() {
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(&format!("can't parse JSON object: {e}")))?;
        let Value::Object(object) = value else {
            return Err(ApiError::bad_request("JSON body is not an object"));
        };
        params.extend(object);
    } else if !body.is_empty() {
        for (k, v) in url::form_urlencoded::parse(&body) {
            params.insert(k.to_string(), coerce(&k, &v));
        }
    }
    Ok((Params(params), uploads))
}

/// Parameters that are always strings, however they look.
const TEXT_KEYS: &[&str] = &[
    "text",
    "caption",
    "url",
    "secret_token",
    "file_id",
    "action",
    "parse_mode",
    "photo",
    "document",
    "voice",
    "audio",
    "video",
];

/// Turns a string parameter into JSON the way Telegram reads it: integers and booleans as
/// such, JSON objects and arrays parsed, text parameters and everything else a string.
fn coerce(key: &str, raw: &str) -> Value {
    if TEXT_KEYS.contains(&key) {
        return json!(raw);
    }
    if let Ok(n) = raw.parse::<i64>() {
        return json!(n);
    }
    let looks_json = raw.starts_with('{') || raw.starts_with('[');
    if let Some(value) = looks_json.then(|| serde_json::from_str(raw).ok()).flatten() {
        return value;
    }
    match raw {
        "true" => json!(true),
        "false" => json!(false),
        _ => json!(raw),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::BAD_REQUEST);
        let mut body = json!({"ok": false, "error_code": self.code,
            "description": self.description});
        if let Some(secs) = self.retry_after {
            body["parameters"] = json!({"retry_after": secs});
        }
        (status, Json(body)).into_response()
    }
}
