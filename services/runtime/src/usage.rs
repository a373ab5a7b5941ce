//! Token usage per bot, model and UTC day (and month), kept in Redis hashes
//! ([`keys::usage_day`], [`keys::usage_month`]): `in:<model>`, `out:<model>` and `total`,
//! added to with `HINCRBY` in one transaction per model call and never expired, so they
//! last as long as Redis' data (its AOF across restarts, its replica across a failover).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Datelike as _, NaiveDate, Utc};
use redis::AsyncCommands as _;

use nanobot_proto::keys;

use crate::store::Store;

/// Tokens of one model: (input, output).
pub type Tokens = (u64, u64);

/// `at`'s UTC day (`YYYY-MM-DD`) and month (`YYYY-MM`).
pub fn day_and_month(at: DateTime<Utc>) -> (String, String) {
    (
        at.format("%Y-%m-%d").to_string(),
        at.format("%Y-%m").to_string(),
    )
}

/// Adds `input`/`output` tokens of `model` to `bot`'s usage of today and this month, in one
/// transaction.
pub async fn record(
    redis: &Store,
    bot: &str,
    model: &str,
    input: u64,
    output: u64,
) -> redis::RedisResult<()> {
    let (day, month) = day_and_month(Utc::now());
    let mut conn = redis.clone();
    let mut pipe = redis::pipe();
    pipe.atomic();
    for key in [keys::usage_day(bot, &day), keys::usage_month(bot, &month)] {
        pipe.hincr(&key, format!("in:{model}"), input)
            .ignore()
            .hincr(&key, format!("out:{model}"), output)
            .ignore()
            .hincr(&key, "total", input + output)
            .ignore();
    }
    pipe.query_async::<()>(&mut conn).await
}

/// `bot`'s total tokens today and this month.
pub async fn spent(redis: &Store, bot: &str) -> redis::RedisResult<(u64, u64)> {
    let (day, month) = day_and_month(Utc::now());
    let mut conn = redis.clone();
    let (d, m): (Option<u64>, Option<u64>) = redis::pipe()
        .hget(keys::usage_day(bot, &day), "total")
        .hget(keys::usage_month(bot, &month), "total")
        .query_async(&mut conn)
        .await?;
    Ok((d.unwrap_or(0), m.unwrap_or(0)))
}

/// `bot`'s usage of `day`: model → tokens.
pub async fn read_day(
    redis: &Store,
    bot: &str,
    day: NaiveDate,
) -> redis::RedisResult<BTreeMap<String, Tokens>> {
    let mut conn = redis.clone();
    let key = keys::usage_day(bot, &day.format("%Y-%m-%d").to_string());
    let fields: HashMap<String, u64> = conn.hgetall(key).await?;
    Ok(fold(fields))
}

/// Parses a report's first day, `YYYY-MM-DD` (default: the first day of this UTC month), as
/// `nanobot usage --since` and `GET /v1/usage?since=` take it.
pub fn since(arg: Option<&str>) -> Result<NaiveDate, String> {
    match arg {
        Some(s) => NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .map_err(|_| format!("{s:?} is not a day like 2026-01-31")),
        None => {
            let today = Utc::now().date_naive();
            Ok(today.with_day(1).unwrap_or(today))
        }
    }
}

/// Days from `since` to today (UTC); negative when `since` is in the future.
pub fn days_until_today(since: NaiveDate) -> i64 {
    (Utc::now().date_naive() - since).num_days()
}

/// One row of a usage report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    /// Bot id.
    pub bot: String,
    /// UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// Model name.
    pub model: String,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// The usage of each of `bots` on each day from `since` to `until` (inclusive), one row per
/// bot, day and model that used tokens. One round trip per bot (its days' `HGETALL`s in one
/// pipeline; a bot's keys share its hash tag, so one cluster slot).
pub async fn report(
    redis: &Store,
    bots: &[String],
    since: NaiveDate,
    until: NaiveDate,
) -> redis::RedisResult<Vec<Row>> {
    let days: Vec<String> = since
        .iter_days()
        .take_while(|d| *d <= until)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .collect();
    let mut rows = Vec::new();
    if days.is_empty() {
        return Ok(rows);
    }
    let mut conn = redis.clone();
    for bot in bots {
        let mut pipe = redis::pipe();
        for day in &days {
            pipe.hgetall(keys::usage_day(bot, day));
        }
        let hashes: Vec<HashMap<String, u64>> = pipe.query_async(&mut conn).await?;
        for (day, fields) in days.iter().zip(hashes) {
            for (model, (input, output)) in fold(fields) {
                rows.push(Row {
                    bot: bot.clone(),
                    day: day.clone(),
                    model,
                    input_tokens: input,
                    output_tokens: output,
                });
            }
        }
    }
    Ok(rows)
}

/// The usage of each of `bots` from `since` to today (UTC): what `nanobot usage` prints and
/// `GET /v1/usage` returns.
pub async fn report_since(
    redis: &Store,
    bots: &[String],
    since: NaiveDate,
) -> redis::RedisResult<Vec<Row>> {
    report(redis, bots, since, Utc::now().date_naive()).await
}

/// The bots a report without a named bot covers: `config_bots` and every bot `registry` holds
/// (a fleet without the registry: `config_bots`), sorted, each once. `nanobot usage` and
/// `GET /v1/usage` both ask this, so a bot added live is in both reports.
pub async fn report_bots(
    mut config_bots: Vec<String>,
    registry: Option<&async_nats::jetstream::kv::Store>,
) -> anyhow::Result<Vec<String>> {
    if let Some(store) = registry {
        config_bots.extend(crate::bot_registry::list(store).await?.into_keys());
    }
    config_bots.sort();
    config_bots.dedup();
    Ok(config_bots)
}

/// Folds a usage hash's `in:<model>`/`out:<model>` fields into model → tokens.
pub fn fold(fields: impl IntoIterator<Item = (String, u64)>) -> BTreeMap<String, Tokens> {
    let mut out = BTreeMap::<String, Tokens>::new();
    for (field, n) in fields {
        if let Some(model) = field.strip_prefix("in:") {
            out.entry(model.to_string()).or_default().0 += n;
        } else if let Some(model) = field.strip_prefix("out:") {
            out.entry(model.to_string()).or_default().1 += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_splits_input_and_output_per_model_with_colons_in_names() {
        let fields = [
            ("in:openai/gpt-4o:mini".to_string(), 7),
            ("out:openai/gpt-4o:mini".to_string(), 3),
            ("in:模型🤖".to_string(), 2),
            ("total".to_string(), 12),
        ];
        let folded = fold(fields);
        assert_eq!(folded["openai/gpt-4o:mini"], (7, 3));
        assert_eq!(folded["模型🤖"], (2, 0));
        assert_eq!(folded.len(), 2);
    }
}
