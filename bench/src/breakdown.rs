//! Where a turn's time goes: sequential turns (one in flight) with timestamps from the client,
//! the NATS observers, Redis `MONITOR` and the probe LLM, cut into hops.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::load;
use crate::probe::{self, BusEvent, LlmCall};
use crate::stats::{self, Summary};
use crate::system::{Kind, Running};

/// One hop of a turn, summarized over the measured turns.
#[derive(Debug, Clone, Serialize)]
pub struct Hop {
    /// What happens in this hop.
    pub name: String,
    /// Its latency summary.
    pub latency: Summary,
}

/// The breakdown of one system.
#[derive(Debug, Clone, Serialize)]
pub struct Breakdown {
    /// Which system.
    pub system: Kind,
    /// Tool calls per turn.
    pub tool_calls: usize,
    /// Turns measured.
    pub turns: usize,
    /// Whole turns as the client saw them.
    pub total: Summary,
    /// The hops, in order; their means add up to about the total's mean.
    pub hops: Vec<Hop>,
    /// Mean size of the first LLM request of a turn, in bytes (the prompt the system built).
    pub llm_request_bytes: f64,
    /// Mean Redis commands per turn by command name (fleet only).
    pub redis_commands: BTreeMap<String, f64>,
    /// Redis round trips per turn: the server's `total_reads_processed` over the measured
    /// turns, every client's, divided by the turns (fleet only). A pipeline or script is one.
    pub redis_reads_per_turn: Option<f64>,
}

/// Observers attached to a fleet (none for upstream).
pub struct Observers {
    bus: Option<(probe::Log<(SystemTime, BusEvent)>, probe::Guard)>,
    redis: Option<(probe::Log<(SystemTime, String)>, probe::Guard)>,
}

impl Observers {
    /// Attaches to the system's NATS and Redis when it has them.
    pub async fn attach(system: &Running) -> anyhow::Result<Self> {
        let bus = match &system.nats_url {
            Some(url) => Some(probe::observe_bus(url).await?),
            None => None,
        };
        let redis = match &system.redis_url {
            Some(url) => Some(probe::monitor_redis(url).await?),
            None => None,
        };
        Ok(Self { bus, redis })
    }
}

/// Hop samples: one per turn, the sum of that hop's pieces within the turn.
#[derive(Debug, Default)]
struct Hops {
    done: BTreeMap<usize, (String, Vec<Duration>)>,
    turn: BTreeMap<usize, (String, Duration)>,
}

impl Hops {
    fn add(&mut self, order: usize, name: &str, from: SystemTime, to: SystemTime) {
        let took = to.duration_since(from).unwrap_or_default();
        let entry = self
            .turn
            .entry(order)
            .or_insert_with(|| (name.into(), Duration::ZERO));
        entry.1 += took;
    }

    fn end_turn(&mut self) {
        for (order, (name, took)) in std::mem::take(&mut self.turn) {
            let entry = self.done.entry(order).or_insert_with(|| (name, Vec::new()));
            entry.1.push(took);
        }
    }
}

/// Runs `turns` sequential turns through `system` (whose LLM is `llm`) and cuts them into hops.
pub async fn run(
    system: &Running,
    llm: &probe::ProbeLlm,
    observers: &Observers,
    tool_calls: usize,
    turns: usize,
) -> anyhow::Result<Breakdown> {
    let (windows, redis_reads_per_turn) = drive(system, turns).await?;
    // Let the observers drain what is already on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = probe::snapshot(&llm.calls);
    let bus = observers.bus.as_ref().map(|(log, _)| probe::snapshot(log));
    let redis = observers
        .redis
        .as_ref()
        .map(|(log, _)| probe::snapshot(log));

    let mut hops = Hops::default();
    let mut totals = Vec::new();
    let mut first_bytes = Vec::new();
    let mut redis_counts: BTreeMap<String, usize> = BTreeMap::new();
    for &(t0, t5) in &windows {
        let within = |t: SystemTime| t >= t0 && t <= t5;
        let llm_calls: Vec<LlmCall> = calls.iter().copied().filter(|c| within(c.start)).collect();
        let Some(first) = llm_calls.first() else {
            anyhow::bail!("a breakdown turn made no llm call");
        };
        totals.push(t5.duration_since(t0).unwrap_or_default());
        first_bytes.push(first.bytes as f64);
        let events: Vec<(SystemTime, BusEvent)> = bus
            .iter()
            .flatten()
            .copied()
            .filter(|(t, _)| within(*t))
            .collect();
        add_turn_hops(&mut hops, (t0, t5), &llm_calls, &events);
        for (at, command) in redis.iter().flatten() {
            if within(*at) {
                *redis_counts.entry(command.clone()).or_default() += 1;
            }
        }
    }
    let measured = windows.len().max(1) as f64;
    Ok(Breakdown {
        system: system.kind,
        tool_calls,
        turns: windows.len(),
        total: stats::summarize(&totals),
        hops: hops
            .done
            .into_values()
            .map(|(name, samples)| Hop {
                name,
                latency: stats::summarize(&samples),
            })
            .collect(),
        llm_request_bytes: first_bytes.iter().sum::<f64>() / first_bytes.len().max(1) as f64,
        redis_commands: redis_counts
            .into_iter()
            .map(|(k, v)| (k, v as f64 / measured))
            .collect(),
        redis_reads_per_turn,
    })
}

/// Sends `turns` sequential turns (after a warm-up) through `system`; returns each measured
/// turn's window and, with Redis, its reads per turn.
async fn drive(
    system: &Running,
    turns: usize,
) -> anyhow::Result<(Vec<(SystemTime, SystemTime)>, Option<f64>)> {
    let client = load::client(1)?;
    let url = format!("{}/v1/chat/completions", system.api_base);
    let mut windows = Vec::with_capacity(turns);
    let warmup = 3;
    let mut info = match &system.redis_url {
        Some(url) => Some(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        ),
        None => None,
    };
    let mut reads_before = None;
    for n in 0..turns + warmup {
        if n == warmup {
            reads_before = redis_reads(info.as_mut()).await?;
        }
        let body = load::turn_body(&format!("breakdown-{}", n / 10), n);
        let start = SystemTime::now();
        load::send_turn(&client, &url, &body, Duration::from_secs(60))
            .await
            .map_err(|e| anyhow::anyhow!("breakdown turn {n}: {e}"))?;
        if n >= warmup {
            windows.push((start, SystemTime::now()));
        }
    }
    // One read is this probe's own INFO.
    let redis_reads_per_turn = match (reads_before, redis_reads(info.as_mut()).await?) {
        (Some(before), Some(after)) => {
            Some(after.saturating_sub(before + 1) as f64 / windows.len().max(1) as f64)
        }
        _ => None,
    };
    Ok((windows, redis_reads_per_turn))
}

/// Cuts one turn (`window`: request sent, response received) into hops from its LLM calls
/// (at least one) and bus events.
fn add_turn_hops(
    hops: &mut Hops,
    (t0, t5): (SystemTime, SystemTime),
    llm_calls: &[LlmCall],
    events: &[(SystemTime, BusEvent)],
) {
    let (first, last) = (&llm_calls[0], &llm_calls[llm_calls.len() - 1]);
    let find = |kind: BusEvent| events.iter().find(|(_, k)| *k == kind).map(|(t, _)| *t);
    let tool_requests: Vec<SystemTime> = events
        .iter()
        .filter(|(_, k)| *k == BusEvent::ToolCall)
        .map(|(t, _)| *t)
        .collect();
    match (find(BusEvent::Inbound), find(BusEvent::Final)) {
        (Some(t1), Some(t4)) => {
            hops.add(0, "gateway: http request → inbound on jetstream", t0, t1);
            hops.add(1, "agent: inbound → first llm request", t1, first.start);
            hops.add(
                7,
                "agent: last llm reply → final reply on jetstream",
                last.end,
                t4,
            );
            hops.add(8, "gateway: final reply → http response", t4, t5);
        }
        _ => {
            hops.add(1, "client → first llm request", t0, first.start);
            hops.add(8, "last llm reply → client", last.end, t5);
        }
    }
    for call in llm_calls {
        hops.add(
            2,
            "llm (probe, instant; all calls of the turn)",
            call.start,
            call.end,
        );
    }
    for (i, pair) in llm_calls.windows(2).enumerate() {
        match tool_requests.get(i) {
            Some(&sent) => {
                hops.add(
                    3,
                    "agent: llm reply → tool request on nats",
                    pair[0].end,
                    sent,
                );
                hops.add(
                    4,
                    "tool round trip + agent → next llm request",
                    sent,
                    pair[1].start,
                );
            }
            None => hops.add(
                4,
                "tool call + agent → next llm request",
                pair[0].end,
                pair[1].start,
            ),
        }
    }
    hops.end_turn();
}

/// Returns how many reads (client requests: a command, a pipeline, a script) the system's
/// Redis has processed, from `INFO stats` on `conn`; `None` without Redis.
async fn redis_reads(
    conn: Option<&mut redis::aio::MultiplexedConnection>,
) -> anyhow::Result<Option<u64>> {
    let Some(conn) = conn else {
        return Ok(None);
    };
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    let reads = info
        .lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok());
    anyhow::ensure!(reads.is_some(), "INFO stats has no total_reads_processed");
    Ok(reads)
}
