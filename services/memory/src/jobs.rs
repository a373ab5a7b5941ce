//! One memory job end to end: answered from its "done" marker when delivered again, run
//! under the bot's memory lease (one writer of a bot's memory files at a time; a job that
//! loses it stops writing, see `writer`), dispatched by kind, marked done with its result.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use nanobot_runtime::store::Store;
use prost::Message as _;
use redis::AsyncCommands as _;

use nanobot_proto::{ConsolidationRequest, ConsolidationResult, MemoryJobKind, keys};
use nanobot_runtime::config::Config;
use nanobot_runtime::lease::Leases;

use crate::bots::{self, MemoryBot};
use crate::consolidate::{self, Ctx};
use crate::dream;
use crate::writer::{LeaseLost, Writer};

/// How long a worker holds a bot's memory lease without renewing it, in session lease times
/// (`runner.sessionLeaseSecs`, 10 s by default: a dead worker's lease expires after 30 s).
const MEMORY_LOCK_LEASES: f64 = 3.0;
/// How long a job waits for the memory lease before it is retried later.
const MEMORY_LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long "done" markers are kept.
const DONE_TTL_SECS: u64 = 7 * 24 * 3600;

/// What jobs share.
#[derive(Debug)]
pub struct Deps {
    /// Config.
    pub cfg: Config,
    /// Redis.
    pub redis: Store,
    /// Core NATS (tool lists, results).
    pub nats: async_nats::Client,
    /// Bots by id, as the registry has them now ([`crate::registry`]).
    pub bots: RwLock<HashMap<String, Arc<MemoryBot>>>,
    /// Per-bot memory leases.
    pub memory_leases: Leases,
    /// Session leases (the agent's keys; fences `last_consolidated`).
    pub session_leases: Leases,
}

impl Deps {
    /// Returns the shared state of worker `instance`.
    pub fn new(cfg: Config, redis: Store, nats: async_nats::Client, instance: &str) -> Self {
        let session_ttl = Duration::from_secs_f64(cfg.runner.session_lease_secs.max(1.0));
        Self {
            bots: RwLock::new(bots::build(&cfg, &nats, &redis)),
            memory_leases: Leases::new(
                redis.clone(),
                instance,
                session_ttl.mul_f64(MEMORY_LOCK_LEASES),
            ),
            session_leases: Leases::new(redis.clone(), instance, session_ttl),
            cfg,
            redis,
            nats,
        }
    }
}

impl Deps {
    /// Returns bot `id`'s state (a job holds it to the end, whatever the registry does).
    pub fn bot(&self, id: &str) -> Option<Arc<MemoryBot>> {
        self.bots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Returns every bot's state.
    pub fn all_bots(&self) -> Vec<Arc<MemoryBot>> {
        let bots = self.bots.read().unwrap_or_else(|e| e.into_inner());
        bots.values().cloned().collect()
    }
}

/// Why a job did not finish.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Another worker holds the bot's memory lease.
    #[error("the memory lease of bot {0} is held by another worker")]
    Busy(String),
    /// Consolidation failed.
    #[error(transparent)]
    Consolidate(#[from] consolidate::Error),
    /// Dream failed.
    #[error(transparent)]
    Dream(#[from] dream::Error),
    /// Redis failed.
    #[error("redis failed: {0}")]
    Redis(#[from] redis::RedisError),
    /// The memory lease was lost mid-job.
    #[error(transparent)]
    LeaseLost(#[from] LeaseLost),
    /// The job kind is not one this worker knows.
    #[error("unknown memory job kind {0}")]
    Unknown(i32),
}

impl JobError {
    /// Whether the job should be delivered again.
    pub fn retryable(&self) -> bool {
        !matches!(
            self,
            Self::Consolidate(consolidate::Error::Snapshot(_))
                | Self::Unknown(_)
                | Self::Dream(dream::Error::Incomplete(_))
        )
    }

    /// Returns the text shown to a user who asked for the job.
    pub fn to_user_message(&self) -> String {
        match self {
            Self::Unknown(_) => "this memory command is not supported".into(),
            Self::Consolidate(consolidate::Error::Snapshot(_)) => "bad archive snapshot".into(),
            Self::Dream(e @ dream::Error::Incomplete(_)) => {
                format!("{e}; the history stays queued for the next run")
            }
            _ => "memory is busy, try again shortly".into(),
        }
    }
}

/// Runs `request` for `bot`.
pub async fn run(
    deps: &Deps,
    bot: &MemoryBot,
    request: &ConsolidationRequest,
) -> Result<ConsolidationResult, JobError> {
    let done_key = keys::memory_job_done(&bot.spec.id, &request.id);
    let mut conn = deps.redis.clone();
    let done: Option<Vec<u8>> = conn.get(&done_key).await?;
    if let Some(encoded) = done {
        tracing::info!("memory job already done, answering again");
        return Ok(ConsolidationResult::decode(encoded.as_slice()).unwrap_or_default());
    }
    let lease = deps
        .memory_leases
        .acquire_within(
            &keys::memory_lock(&bot.spec.id),
            &keys::memory_fence(&bot.spec.id),
            MEMORY_LOCK_WAIT,
        )
        .await
        .ok_or_else(|| JobError::Busy(bot.spec.id.clone()))?;
    let writer = Writer::new(&bot.spec.id, &lease, &deps.redis);
    let result = dispatch(deps, bot, request, writer).await;
    lease.release().await;
    let result = result?;
    let _: () = conn
        .set_ex(&done_key, result.encode_to_vec(), DONE_TTL_SECS)
        .await?;
    Ok(result)
}

async fn dispatch(
    deps: &Deps,
    bot: &MemoryBot,
    request: &ConsolidationRequest,
    writer: Writer<'_>,
) -> Result<ConsolidationResult, JobError> {
    let ctx = Ctx {
        cfg: &deps.cfg,
        bot,
        leases: &deps.session_leases,
        writer,
    };
    let key = request.session_key.as_str();
    let arg = (!request.arg.trim().is_empty()).then(|| request.arg.trim());
    if !matches!(
        request.kind(),
        MemoryJobKind::Dream | MemoryJobKind::Tokens | MemoryJobKind::Archive | MemoryJobKind::Idle
    ) {
        // The Dream commands are quick: one check before them; the long jobs check before
        // each write.
        writer.check().await?;
    }
    let reply = match request.kind() {
        MemoryJobKind::Dream => Some(dream::run(ctx).await?),
        MemoryJobKind::DreamLog => Some(dream::log(bot, arg)?),
        MemoryJobKind::DreamRestore => Some(dream::restore(bot, arg)?),
        MemoryJobKind::DreamPrompt => Some(dream::prompt(bot, arg)?),
        MemoryJobKind::DreamSkip => Some(dream::skip(writer, bot).await?),
        _ => None,
    };
    if let Some(reply) = reply {
        return Ok(ConsolidationResult {
            reply,
            ..Default::default()
        });
    }
    let outcome = match request.kind() {
        MemoryJobKind::Tokens => {
            consolidate::by_tokens(ctx, key, u64::from(request.overhead_tokens)).await?
        }
        MemoryJobKind::Archive => consolidate::snapshot(ctx, key, &request.messages_json).await?,
        MemoryJobKind::Idle => consolidate::idle(ctx, key).await?,
        _ => return Err(JobError::Unknown(request.kind)),
    };
    Ok(ConsolidationResult {
        archived_messages: u32::try_from(outcome.archived).unwrap_or(u32::MAX),
        last_consolidated: u32::try_from(outcome.last_consolidated).unwrap_or(u32::MAX),
        ..Default::default()
    })
}
