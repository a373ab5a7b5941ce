//! `nanobot usage [--bot B] [--since YYYY-MM-DD]`: tokens in/out per bot, UTC day and model,
//! as the runners recorded them from the providers' reports ([`nanobot_runtime::usage`]).

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use chrono::NaiveDate;
use tokio_util::sync::CancellationToken;

use nanobot_proto::subjects::Role;
use nanobot_runtime::config::{self, Config};
use nanobot_runtime::usage::{self, Row};
use nanobot_runtime::{bot_registry, bus, store};

/// Parses `--since`: a UTC day `YYYY-MM-DD` (default: the first day of this month).
pub fn since(arg: Option<&str>) -> anyhow::Result<NaiveDate> {
    usage::since(arg).map_err(|e| anyhow::anyhow!("--since {e}"))
}

/// The report as lines: one per bot, day and model, then each bot's total.
pub fn render(rows: &[Row]) -> Vec<String> {
    if rows.is_empty() {
        return vec!["no token usage recorded".into()];
    }
    let mut lines = vec![format!(
        "{:<10}  {:<16}  {:<32}  {:>12}  {:>12}",
        "day", "bot", "model", "input", "output"
    )];
    let mut totals = std::collections::BTreeMap::<&str, (u64, u64)>::new();
    for r in rows {
        lines.push(format!(
            "{:<10}  {:<16}  {:<32}  {:>12}  {:>12}",
            r.day, r.bot, r.model, r.input_tokens, r.output_tokens
        ));
        let t = totals.entry(&r.bot).or_default();
        t.0 += r.input_tokens;
        t.1 += r.output_tokens;
    }
    for (bot, (i, o)) in totals {
        lines.push(format!("total {bot}: {i} input, {o} output tokens"));
    }
    lines
}

/// Prints the usage of `bot` since `since`; without `bot`, of the config's bots and every bot
/// in the registry (the same bots `GET /v1/usage` reports). A fleet whose NATS or registry is
/// not reachable reports the config's bots, saying so on stderr.
pub async fn run(cfg: &Config, bot: Option<&str>, since_arg: Option<&str>) -> anyhow::Result<i32> {
    let since = since(since_arg)?;
    let cancel = CancellationToken::new();
    let guard = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        guard.cancel();
    });
    let redis = store::connect(&cfg.store, &cancel)
        .await
        .with_context(|| format!("connect to redis at {}", config::redact_url(&cfg.store.url)))?;
    let bots: Vec<String> = match bot {
        Some(b) => vec![b.to_string()],
        None => {
            let config_bots = cfg.bots().into_iter().map(|b| b.id).collect();
            let registry = registry(cfg, &cancel).await;
            usage::report_bots(config_bots, registry.as_ref()).await?
        }
    };
    let rows = usage::report_since(&redis, &bots, since).await?;
    for line in render(&rows) {
        println!("{line}");
    }
    Ok(0)
}

/// The bot registry, or `None` (with a warning) when NATS or the registry is not reachable.
async fn registry(cfg: &Config, cancel: &CancellationToken) -> Option<kv::Store> {
    let warn = |e: &anyhow::Error| eprintln!("warning: {e:#}; reporting the config's bots only");
    let bus = bus::connect(&cfg.bus, Role::Cli, "nanobot-cli", cancel)
        .await
        .with_context(|| format!("connect to nats at {}", config::redact_url(&cfg.bus.url)))
        .inspect_err(warn)
        .ok()?;
    bot_registry::open(&bus.js).await.inspect_err(warn).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_rejects_a_malformed_day_with_a_clear_error() {
        let err = since(Some("31/01/2026")).unwrap_err().to_string();
        assert!(err.contains("--since \"31/01/2026\""), "{err}");
        assert_eq!(
            since(Some("2026-01-31")).unwrap(),
            NaiveDate::from_ymd_opt(2026, 1, 31).unwrap()
        );
    }

    #[test]
    fn render_totals_each_bot_and_keeps_cjk_model_names() {
        let row = |bot: &str, model: &str, i, o| Row {
            bot: bot.into(),
            day: "2026-11-27".into(),
            model: model.into(),
            input_tokens: i,
            output_tokens: o,
        };
        let lines = render(&[
            row("a", "模型🤖", 10, 2),
            row("a", "m", 1, 1),
            row("b", "m", 5, 5),
        ]);
        assert!(lines[1].contains("模型🤖"), "{lines:?}");
        assert!(lines.contains(&"total a: 11 input, 3 output tokens".to_string()));
        assert!(lines.contains(&"total b: 5 input, 5 output tokens".to_string()));
    }
}
