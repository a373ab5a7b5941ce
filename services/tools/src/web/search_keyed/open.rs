//! The two APIs 0.3.5 calls with or without a key: Keenable (its free `/public` endpoint
//! when keyless) and AnySearch (an anonymous quota when keyless).

use serde_json::{Value, json};

use super::{Call, failed_status, field, first, json_body, send, text};
use crate::web::search_providers::Hit;

/// Keenable: `POST {query}` (to `{endpoint}/public` without a key), results in
/// `results[].{title,url,snippet|description}`.
pub(super) async fn keenable(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let mut request = call.client.post(if call.api_key.is_empty() {
        format!("{}/public", call.endpoints.keenable)
    } else {
        call.endpoints.keenable.clone()
    });
    request = request.header("X-Keenable-Title", "nanobot");
    if !call.api_key.is_empty() {
        request = request.header("X-API-Key", call.api_key);
    }
    let failed = |e: String| format!("Error: Keenable search failed: {e}");
    let response = send(request.json(&json!({"query": call.query})))
        .await
        .map_err(failed)?
        .map_err(|r| failed_status("Keenable", &r))?;
    let data = json_body(response).await.map_err(failed)?;
    let hit = |x: &Value| Hit {
        title: field(x, "title"),
        url: field(x, "url"),
        content: text(first(x, &["snippet"]).or_else(|| x.get("description"))),
    };
    let results = data.get("results").and_then(Value::as_array);
    Ok(results
        .map(|r| r.iter().map(hit).collect())
        .unwrap_or_default())
}

/// AnySearch: `POST {query, max_results}` (a bearer key when configured), results in
/// `data.results[].{title,url,content|snippet}`.
pub(super) async fn anysearch(call: &Call<'_>) -> Result<Vec<Hit>, String> {
    let mut request = call
        .client
        .post(&call.endpoints.anysearch)
        .header("X-Anysearch-Client", "nanobot/1.0.0");
    if !call.api_key.is_empty() {
        request = request.bearer_auth(call.api_key);
    }
    let failed = |e: String| format!("Error: AnySearch search failed: {e}");
    let body = json!({"query": call.query, "max_results": call.n});
    let response = send(request.json(&body))
        .await
        .map_err(failed)?
        .map_err(|r| failed_status("AnySearch", &r))?;
    let data = json_body(response).await.map_err(failed)?;
    let hit = |r: &Value| Hit {
        title: field(r, "title"),
        url: field(r, "url"),
        content: text(first(r, &["content"]).or_else(|| r.get("snippet"))),
    };
    let results = data.pointer("/data/results").and_then(Value::as_array);
    Ok(results
        .map(|r| r.iter().filter(|v| v.is_object()).map(hit).collect())
        .unwrap_or_default())
}
