//! Per-bot limits and token usage (`bots.<id>.limits`). Before a turn calls the model,
//! [`refusal`] checks the sender's messages of the last minute and the bot's tokens of the
//! day and month; a message over a limit is answered with a refusal, costs no model call and
//! is counted in `nanobot_limit_refusals_total{bot,limit}`. Every model call's tokens are
//! added to the bot's day and month usage by [`UsageRecorder`] as soon as the call returns.
//!
//! Across replicas the counters live in Redis (one atomic script or transaction each), so
//! every runner sees the same window and budget. A runner SIGKILLed mid-turn keeps the usage
//! of the calls that returned (they were spent; the retry's calls are new calls, counted
//! once each); its sender-window entry is keyed by message id, so the retried turn is not
//! counted twice.

use redis::AsyncCommands as _;

use nanobot_core::hooks::{AgentHook, HookResult, IterationContext};
use nanobot_proto::keys;
use nanobot_runtime::config::BotLimits;
use nanobot_runtime::metrics;
use nanobot_runtime::store::Store;
use nanobot_runtime::usage;

use crate::base::deps::Deps;
use crate::base::error::Error;
use crate::base::input::TurnInput;

/// The sliding window of the per-sender limit, in ms.
const WINDOW_MS: u64 = 60_000;

/// Adds message `ARGV[1]` to the sender's window unless `ARGV[2]` messages of the last minute
/// are already in it (by Redis' clock, the same for every runner); 1 = allowed. A message
/// already in the window (its turn retried) is allowed again without counting twice.
const SENDER_WINDOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Takes a turn slot `ARGV[1]` of `KEYS[1]` (expiring `ARGV[3]` ms from now, Redis' clock)
/// unless `ARGV[2]` unexpired slots are taken; 1 = taken. Expired slots (a dead runner's) are
/// dropped first.
const TAKE_SLOT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Extends slot `ARGV[1]` to `ARGV[2]` ms from now, if it is still there.
const RENEW_SLOT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// One of a bot's `maxConcurrentTurns` slots, held by this runner for one turn: a Redis entry
/// that expires after the session lease time unless renewed (every third of it while held),
/// so a SIGKILLed runner's slot frees itself; dropping it frees it at once.
#[derive(Debug)]
pub struct TurnSlot {
    renew: tokio::task::JoinHandle<()>,
    redis: Store,
    key: String,
    token: String,
}

impl TurnSlot {
    /// Takes a slot of `bot` (`None` when it has no concurrency limit); fails with
    /// [`Error::BotBusy`] while every slot is taken.
    pub async fn take(deps: &Deps, bot: &str) -> Result<Option<Self>, Error> {
        let Some(max) = of(deps, bot).max_concurrent_turns else {
            return Ok(None);
        };
        let ttl = std::time::Duration::from_secs_f64(deps.cfg.runner.session_lease_secs.max(1.0));
        let ttl_ms = ttl.as_millis() as u64;
        let key = keys::bot_turns(bot);
        let token = uuid::Uuid::new_v4().to_string();
        let mut conn = deps.redis.clone();
        let taken: i64 = redis::Script::new(TAKE_SLOT)
            .key(&key)
            .arg(&token)
            .arg(max)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await?;
        if taken == 0 {
            metrics::get().limit_refusal(bot, "concurrent_turns");
            return Err(Error::BotBusy(bot.to_string()));
        }
        let (k, t) = (key.clone(), token.clone());
        let renew = tokio::spawn(async move {
            let mut tick = tokio::time::interval(ttl / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let renewed = redis::Script::new(RENEW_SLOT)
                    .key(&k)
                    .arg(&t)
                    .arg(ttl_ms)
                    .invoke_async::<i64>(&mut conn)
                    .await;
                if let Err(e) = renewed {
                    tracing::warn!(error = %e, "failed to renew a turn slot");
                }
            }
        });
        Ok(Some(Self {
            renew,
            redis: deps.redis.clone(),
            key,
            token,
        }))
    }
}

impl TurnSlot {
    /// Frees the slot now (the next turn may take it at once).
    pub async fn release(mut self) {
        self.renew.abort();
        let mut conn = self.redis.clone();
        if let Err(e) = conn.zrem::<_, _, ()>(&self.key, &self.token).await {
            tracing::warn!(error = %e, "failed to free a turn slot (it expires)");
        }
        self.token.clear();
    }
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        self.renew.abort();
        if self.token.is_empty() {
            return;
        }
        let (mut conn, key, token) = (self.redis.clone(), self.key.clone(), self.token.clone());
        tokio::spawn(async move {
            if let Err(e) = conn.zrem::<_, _, ()>(&key, &token).await {
                tracing::warn!(error = %e, "failed to free a turn slot (it expires)");
            }
        });
    }
}

/// `bot`'s limits, as the bot registry has them now (a `nanobot bots update` applies to the
/// next message); the config's for a bot the runner does not serve.
pub fn of(deps: &Deps, bot: &str) -> BotLimits {
    deps.bot(bot)
        .map(|b| b.limits)
        .unwrap_or_else(|| deps.cfg.bot_limits(bot))
}

/// The reply refusing `input` when one of `bot`'s limits is hit (counted in the metrics).
pub async fn refusal(
    deps: &Deps,
    bot: &str,
    input: &TurnInput,
) -> redis::RedisResult<Option<String>> {
    let limits = of(deps, bot);
    let hit = match check(&deps.redis, bot, &limits, input).await? {
        Some(hit) => hit,
        None => return Ok(None),
    };
    metrics::get().limit_refusal(bot, hit.label());
    tracing::info!(bot, limit = hit.label(), "message refused by a limit");
    Ok(Some(hit.text(&limits)))
}

/// A limit that refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hit {
    SenderRate,
    DailyTokens,
    MonthlyTokens,
}

impl Hit {
    fn label(self) -> &'static str {
        match self {
            Self::SenderRate => "sender_rate",
            Self::DailyTokens => "daily_tokens",
            Self::MonthlyTokens => "monthly_tokens",
        }
    }

    fn text(self, limits: &BotLimits) -> String {
        match self {
            Self::SenderRate => format!(
                "You are sending messages too fast: this bot answers at most {} messages a minute from one sender. Please wait a moment and try again.",
                limits
                    .max_messages_per_minute_per_sender
                    .unwrap_or_default()
            ),
            Self::DailyTokens => format!(
                "This bot has used its daily token budget ({} tokens). It answers again after midnight UTC.",
                limits.daily_token_budget.unwrap_or_default()
            ),
            Self::MonthlyTokens => format!(
                "This bot has used its monthly token budget ({} tokens). It answers again next month (UTC).",
                limits.monthly_token_budget.unwrap_or_default()
            ),
        }
    }
}

async fn check(
    redis: &Store,
    bot: &str,
    limits: &BotLimits,
    input: &TurnInput,
) -> redis::RedisResult<Option<Hit>> {
    if limits.daily_token_budget.is_some() || limits.monthly_token_budget.is_some() {
        let (day, month) = usage::spent(redis, bot).await?;
        if limits.daily_token_budget.is_some_and(|b| day >= b) {
            return Ok(Some(Hit::DailyTokens));
        }
        if limits.monthly_token_budget.is_some_and(|b| month >= b) {
            return Ok(Some(Hit::MonthlyTokens));
        }
    }
    // A sender's new message, not a goal's continuation or an automation's turn.
    let (Some(max), Some(msg), false) = (
        limits.max_messages_per_minute_per_sender,
        input.message.as_ref(),
        input.continuation,
    ) else {
        return Ok(None);
    };
    let key = keys::sender_rate(bot, &msg.channel, &msg.sender_id);
    let mut conn = redis.clone();
    let allowed: i64 = redis::Script::new(SENDER_WINDOW)
        .key(key)
        .arg(&input.id)
        .arg(max)
        .arg(WINDOW_MS)
        .invoke_async(&mut conn)
        .await?;
    Ok((allowed == 0).then_some(Hit::SenderRate))
}

/// A hook adding each model call's tokens to its bot's usage as soon as the call returned.
#[derive(Debug)]
pub struct UsageRecorder {
    redis: Store,
    bot: String,
    model: String,
}

impl UsageRecorder {
    /// Records the calls of `bot`, whose requested model is `model` (a fallback model that
    /// answered is recorded under its own name).
    pub fn new(redis: Store, bot: &str, model: &str) -> Self {
        Self {
            redis,
            bot: bot.to_string(),
            model: model.to_string(),
        }
    }
}

impl AgentHook for UsageRecorder {
    fn name(&self) -> &str {
        "usage_recorder"
    }

    fn after_iteration(&self, ctx: &IterationContext<'_>) -> HookResult {
        let (input, output) = (ctx.usage.prompt_tokens, ctx.usage.completion_tokens);
        if input == 0 && output == 0 {
            return Ok(());
        }
        let model = ctx
            .response
            .and_then(|r| r.model.clone())
            .unwrap_or_else(|| self.model.clone());
        let (redis, bot) = (self.redis.clone(), self.bot.clone());
        tokio::spawn(async move {
            if let Err(e) = usage::record(&redis, &bot, &model, input, output).await {
                tracing::warn!(error = %e, "failed to record token usage");
            }
        });
        Ok(())
    }
}
