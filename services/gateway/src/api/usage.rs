//! `GET /v1/usage?bot=&since=`: tokens in/out per bot, model and UTC day, the numbers of
//! `nanobot usage` (the same [`nanobot_runtime::usage::report`]), with the API key.
//!
//! `since` is a UTC day `YYYY-MM-DD` (default: the first day of this month; at most 400 days
//! back, so one request reads a bounded number of hashes); without `bot`
//! the report covers the config's and the registry's bots. The gateway's Redis user reads
//! the usage hashes only (read-only ACL); nothing is written. SIGKILL: nothing to lose.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use nanobot_runtime::usage;

use super::AppState;
use super::error::ApiError;

/// How far back one request may ask (each day is one `HGETALL` per bot).
const MAX_DAYS: i64 = 400;

/// The query of `GET /v1/usage`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct UsageQuery {
    bot: Option<String>,
    since: Option<String>,
}

pub(super) async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    state.authorize_admin(&headers)?;
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let since = usage::since(query.since.as_deref().filter(|s| !s.is_empty()))
        .map_err(|e| ApiError::BadRequest(format!("since: {e}")))?;
    if usage::days_until_today(since) > MAX_DAYS {
        return Err(ApiError::BadRequest(format!(
            "since: at most {MAX_DAYS} days back; use nanobot usage for longer reports"
        )));
    }
    let bots = state
        .usage_bots(query.bot.as_deref().filter(|b| !b.is_empty()))
        .await?;
    let redis = state.usage_store().await?;
    let rows = usage::report_since(&redis, &bots, since)
        .await
        .map_err(|e| ApiError::internal("read the token usage", e))?;
    let mut totals = BTreeMap::<&str, (u64, u64)>::new();
    for r in &rows {
        let t = totals.entry(&r.bot).or_default();
        t.0 += r.input_tokens;
        t.1 += r.output_tokens;
    }
    let totals: BTreeMap<&str, Value> = totals
        .into_iter()
        .map(|(bot, (i, o))| (bot, json!({"input_tokens": i, "output_tokens": o})))
        .collect();
    Ok(Json(json!({
        "object": "usage",
        "since": since.format("%Y-%m-%d").to_string(),
        "data": rows,
        "totals": totals,
    })))
}
