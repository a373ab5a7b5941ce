//! The `cron` tool (add / list / remove), upstream's contract and strings: jobs made in a
//! chat are bound to its session and run there; system jobs are listed but never removed.
//! Pure over a workspace's store, so any tool executor can serve it.

use std::path::Path;

use chrono::{DateTime, NaiveDateTime, TimeZone as _, Utc};
use serde_json::{Value, json};

use nanobot_runtime::config::{DreamConfig, HeartbeatConfig};

use crate::limits::{self, Limits};
use crate::schedule;
use crate::store::{self, AGENT_TURN, Job, JobState, Payload, SYSTEM_EVENT, Schedule};

/// The tool's name.
pub const NAME: &str = "cron";

/// Where the call comes from.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// Session of the turn.
    pub session_key: &'a str,
    /// Channel of the turn's chat.
    pub channel: &'a str,
    /// The turn's chat.
    pub chat_id: &'a str,
    /// The turn runs a cron job (no new jobs from there).
    pub in_cron: bool,
    /// The agent's time zone (naive `at` times and `cron_expr` without `tz`).
    pub default_tz: &'a str,
    /// The bot of the chat: its jobs are the only ones it lists, removes and runs.
    pub bot: &'a str,
    /// What may be scheduled (`tools.cron`).
    pub limits: Limits,
}

/// Returns the tool's description for `default_tz`.
pub fn description(default_tz: &str) -> String {
    format!(
        "Schedule reminders and recurring tasks. Actions: add, list, remove. If tz is omitted, \
         cron expressions and naive ISO times default to {default_tz}."
    )
}

/// The system jobs the cron role keeps in every workspace (upstream registers them when the
/// gateway starts), so `list` shows them before the scheduler's first tick wrote them.
#[derive(Debug, Clone, Copy)]
pub struct SystemJobs<'a> {
    /// `gateway.heartbeat`.
    pub heartbeat: &'a HeartbeatConfig,
    /// `agents.defaults.dream`.
    pub dream: &'a DreamConfig,
}

/// Returns the JSON Schema of the parameters (upstream's, texts included).
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "description": "Action to perform", "enum": ["add", "list", "remove"]},
            "name": {"type": "string", "description": "Optional short human-readable label for the job (e.g., 'weather-monitor', 'daily-standup'). Defaults to first 30 chars of message."},
            "message": {"type": "string", "description": "REQUIRED when action='add'. Instruction for the agent to execute when the job triggers (e.g., 'Send a reminder to WeChat: xxx' or 'Check system status and report'). Not used for action='list' or action='remove'."},
            "every_seconds": {"type": "integer", "description": "Interval in seconds (for recurring tasks)"},
            "cron_expr": {"type": "string", "description": "Cron expression like '0 9 * * *' (for scheduled tasks)"},
            "tz": {"type": "string", "description": "Optional IANA timezone for cron expressions (e.g. 'America/Vancouver'). When omitted with cron_expr, the tool's default timezone applies."},
            "at": {"type": "string", "description": "ISO datetime for one-time execution (e.g. '2026-02-12T10:30:00'). Naive values use the tool's default timezone."},
            "job_id": {"type": "string", "description": "REQUIRED when action='remove'. Job ID to remove (obtain via action='list')."}
        },
        "required": ["action"],
        "description": "Action-specific parameters: add requires a non-empty message plus one schedule (every_seconds, cron_expr, or at); remove requires job_id; list only needs action. Per-action requirements are enforced at runtime (see field descriptions) so the top-level schema stays compatible with providers (e.g. OpenAI Codex/Responses) that reject oneOf/anyOf/allOf/enum/not at the root of function parameters.",
        "additionalProperties": false
    })
}

/// Returns upstream's per-action checks run after the schema's (`validate_params`): each
/// problem joins the `Error: Invalid parameters for tool 'cron': …` list.
pub fn validate(args: &Value) -> Vec<String> {
    let blank = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .is_none_or(|v| v.trim().is_empty())
    };
    let mut errors = Vec::new();
    match args.get("action").and_then(Value::as_str) {
        Some("add") if blank("message") => {
            errors.push("message is required when action='add'".to_string());
        }
        Some("remove") if blank("job_id") => {
            errors.push("job_id is required when action='remove'".to_string());
        }
        _ => {}
    }
    errors
}

/// Runs one call on the jobs of `workspace` at `now_ms`; the text is what the model sees.
pub fn run(workspace: &Path, ctx: &CallContext<'_>, args: &Value, now_ms: i64) -> String {
    run_with(workspace, ctx, None, args, now_ms)
}

/// Runs one call as [`run`]; `list` also shows the `system` jobs the scheduler keeps, as
/// they will be written, when it has not written them yet.
pub fn run_with(
    workspace: &Path,
    ctx: &CallContext<'_>,
    system: Option<SystemJobs<'_>>,
    args: &Value,
    now_ms: i64,
) -> String {
    let text = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let outcome = match text("action").unwrap_or_default() {
        "add" if ctx.in_cron => {
            Ok("Error: cannot schedule new jobs from within a cron job execution".to_string())
        }
        "add" => add(workspace, ctx, args, now_ms),
        "list" => list(workspace, ctx, system, now_ms),
        "remove" => remove(workspace, ctx.bot, text("job_id")),
        other => Ok(format!("Unknown action: {other}")),
    };
    outcome.unwrap_or_else(|e| format!("Error: cron store failed: {e:#}"))
}

fn add(
    workspace: &Path,
    ctx: &CallContext<'_>,
    args: &Value,
    now_ms: i64,
) -> anyhow::Result<String> {
    let Some(message) = args
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
    else {
        return Ok(
            "Error: cron action='add' requires a non-empty 'message' parameter describing \
                   what to do when the job triggers (e.g. the reminder text). Retry including \
                   message=\"...\"."
                .into(),
        );
    };
    if ctx.session_key.is_empty() || ctx.channel.is_empty() || ctx.chat_id.is_empty() {
        return Ok("Error: scheduled cron jobs must be created from a chat session".into());
    }
    let (sched, delete_after_run) = match schedule_of(ctx, args, now_ms) {
        Ok(found) => found,
        Err(e) => return Ok(format!("Error: {e}")),
    };
    let name = arg_text(args, "name")
        .map(str::to_string)
        .unwrap_or_else(|| message.chars().take(30).collect());
    let job = Job {
        id: store::new_id(),
        name,
        enabled: true,
        state: JobState {
            next_run_at_ms: schedule::next_run(&sched, now_ms),
            ..Default::default()
        },
        schedule: sched,
        payload: Payload {
            kind: AGENT_TURN.into(),
            message: message.into(),
            session_key: Some(ctx.session_key.into()),
            origin_channel: Some(ctx.channel.into()),
            origin_chat_id: Some(ctx.chat_id.into()),
            ..Default::default()
        },
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        delete_after_run,
        bot: (!ctx.bot.is_empty()).then(|| ctx.bot.to_string()),
        extra: Default::default(),
    };
    let reply = format!("Created job '{}' (id: {})", job.name, job.id);
    // The count and the write under one lock: concurrent adds never pass the cap.
    store::update(workspace, |jobs| {
        match ctx.limits.check_room(jobs, ctx.bot, ctx.session_key) {
            Ok(()) => {
                jobs.jobs.push(job);
                (true, reply)
            }
            Err(e) => (false, format!("Error: {e}")),
        }
    })
}

fn arg_text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `every_seconds` as a whole number (a float is cut, a number past `i64` saturates);
/// `None` when absent or 0 (upstream treats 0 as not given).
fn every_seconds(args: &Value) -> Option<i64> {
    let v = args.get("every_seconds")?;
    let seconds = v
        .as_i64()
        .or_else(|| v.as_u64().map(|_| i64::MAX))
        .or_else(|| v.as_f64().map(|f| f as i64))?;
    (seconds != 0).then_some(seconds)
}

/// The schedule an `add` asks for (and whether it runs once), within [`Limits`]; the error is
/// the text after `Error: `.
fn schedule_of(
    ctx: &CallContext<'_>,
    args: &Value,
    now_ms: i64,
) -> Result<(Schedule, bool), String> {
    let tz = arg_text(args, "tz");
    let cron_expr = arg_text(args, "cron_expr");
    if tz.is_some() && cron_expr.is_none() {
        return Err("tz can only be used with cron_expr".into());
    }
    if let Some(tz) = tz {
        schedule::check_zone(tz)?;
    }
    let (sched, once) = if let Some(every) = every_seconds(args) {
        let sched = Schedule {
            kind: "every".into(),
            every_ms: Some(ctx.limits.every_ms(every)?),
            ..Default::default()
        };
        (sched, false)
    } else if let Some(expr) = cron_expr {
        let zone = tz.unwrap_or(ctx.default_tz);
        schedule::check_zone(zone)?;
        let sched = Schedule {
            kind: "cron".into(),
            expr: Some(expr.into()),
            tz: Some(zone.into()),
            ..Default::default()
        };
        (sched, false)
    } else if let Some(at) = arg_text(args, "at") {
        let at_ms = parse_at(at, ctx.default_tz)?;
        limits::check_at(at, at_ms, now_ms)?;
        let sched = Schedule {
            kind: "at".into(),
            at_ms: Some(at_ms),
            ..Default::default()
        };
        (sched, true)
    } else {
        return Err("either every_seconds, cron_expr, or at is required".into());
    };
    schedule::validate(&sched)?;
    if sched.kind == "cron" {
        ctx.limits.check_cron(&sched, now_ms)?;
    }
    Ok((sched, once))
}

/// Parses an ISO datetime; naive values are in `default_tz`.
fn parse_at(at: &str, default_tz: &str) -> Result<i64, String> {
    let invalid =
        || format!("invalid ISO datetime format '{at}'. Expected format: YYYY-MM-DDTHH:MM:SS");
    if let Ok(aware) = DateTime::parse_from_rfc3339(at) {
        return Ok(aware.timestamp_millis());
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(at, f).ok())
    .or_else(|| {
        chrono::NaiveDate::parse_from_str(at, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    })
    .ok_or_else(invalid)?;
    let zone = schedule::check_zone(default_tz)?;
    zone.from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp_millis())
        .ok_or_else(invalid)
}

/// Returns whether `bot` sees `job`: its own, the system jobs and jobs of no bot (a legacy
/// file's); another bot's job is neither listed nor removed.
fn visible(job: &Job, bot: &str) -> bool {
    bot.is_empty() || job.bot.as_deref().is_none_or(|b| b == bot)
}

fn list(
    workspace: &Path,
    ctx: &CallContext<'_>,
    system: Option<SystemJobs<'_>>,
    now_ms: i64,
) -> anyhow::Result<String> {
    let default_tz = ctx.default_tz;
    let mut jobs = store::load(workspace)?;
    jobs.jobs.retain(|j| visible(j, ctx.bot));
    if let Some(system) = system {
        crate::register_heartbeat(&mut jobs, system.heartbeat, now_ms);
        crate::register_dream(&mut jobs, system.dream, default_tz, now_ms);
    }
    let mut enabled: Vec<&Job> = jobs.jobs.iter().filter(|j| j.enabled).collect();
    // Soonest first; jobs with no next run last (upstream `list_jobs`).
    enabled.sort_by_key(|j| {
        j.state
            .next_run_at_ms
            .filter(|n| *n != 0)
            .unwrap_or(i64::MAX)
    });
    if enabled.is_empty() {
        return Ok("No scheduled jobs.".into());
    }
    let mut lines = Vec::new();
    for job in enabled {
        let tz = job.schedule.tz.as_deref().unwrap_or(default_tz);
        let mut parts = vec![format!(
            "- {} (id: {}, {})",
            job.name,
            job.id,
            timing(&job.schedule, tz)
        )];
        if job.payload.kind == SYSTEM_EVENT {
            let purpose = if job.name == "dream" {
                "Dream memory consolidation for long-term memory."
            } else {
                "System-managed internal job."
            };
            parts.push(format!("  Purpose: {purpose}"));
            parts.push("  Protected: visible for inspection, but cannot be removed.".into());
        }
        if let Some(last) = job.state.last_run_at_ms {
            let mut info = format!(
                "  Last run: {} — {}",
                timestamp(last, tz),
                job.state.last_status.as_deref().unwrap_or("unknown")
            );
            if let Some(error) = &job.state.last_error {
                info.push_str(&format!(" ({error})"));
            }
            parts.push(info);
        }
        if let Some(next) = job.state.next_run_at_ms.filter(|n| *n != 0) {
            parts.push(format!("  Next run: {}", timestamp(next, tz)));
        }
        lines.push(parts.join("\n"));
    }
    Ok(format!("Scheduled jobs:\n{}", lines.join("\n")))
}

fn remove(workspace: &Path, bot: &str, job_id: Option<&str>) -> anyhow::Result<String> {
    let Some(job_id) = job_id else {
        return Ok("Error: job_id is required for remove".into());
    };
    store::update(workspace, |jobs| {
        let found = jobs.jobs.iter().position(|j| j.id == job_id);
        let Some(index) = found.filter(|i| visible(&jobs.jobs[*i], bot)) else {
            return (false, format!("Job {job_id} not found"));
        };
        let job = &jobs.jobs[index];
        if job.payload.kind == SYSTEM_EVENT {
            let text = if job.name == "dream" {
                "Cannot remove job `dream`.\nThis is a system-managed Dream memory consolidation \
                 job for long-term memory.\nIt remains visible so you can inspect it, but it \
                 cannot be removed."
                    .to_string()
            } else {
                format!(
                    "Cannot remove job `{job_id}`.\nThis is a protected system-managed cron job."
                )
            };
            return (false, text);
        }
        jobs.jobs.remove(index);
        (true, format!("Removed job {job_id}"))
    })
}

/// Upstream's timing text: `cron: EXPR (TZ)`, `every 2h|30m|90s|200ms`, `at ISO (TZ)`.
pub fn timing(schedule: &Schedule, tz: &str) -> String {
    match schedule.kind.as_str() {
        "cron" => match &schedule.tz {
            Some(zone) => format!("cron: {} ({zone})", schedule.expr.as_deref().unwrap_or("")),
            None => format!("cron: {}", schedule.expr.as_deref().unwrap_or("")),
        },
        "every" if schedule.every_ms.is_some_and(|ms| ms != 0) => {
            let ms = schedule.every_ms.unwrap_or_default();
            if ms % 3_600_000 == 0 {
                format!("every {}h", ms / 3_600_000)
            } else if ms % 60_000 == 0 {
                format!("every {}m", ms / 60_000)
            } else if ms % 1000 == 0 {
                format!("every {}s", ms / 1000)
            } else {
                format!("every {ms}ms")
            }
        }
        "at" if schedule.at_ms.is_some_and(|ms| ms != 0) => {
            format!("at {}", timestamp(schedule.at_ms.unwrap_or_default(), tz))
        }
        other => other.to_string(),
    }
}

/// `ISO-8601 with offset (TZ)`, as Python's `isoformat()` prints it.
pub fn timestamp(ms: i64, tz: &str) -> String {
    let Some(utc) = Utc.timestamp_millis_opt(ms).single() else {
        return ms.to_string();
    };
    let pattern = if ms.rem_euclid(1000) == 0 {
        "%Y-%m-%dT%H:%M:%S%:z"
    } else {
        "%Y-%m-%dT%H:%M:%S%.6f%:z"
    };
    match schedule::check_zone(tz) {
        Ok(zone) => format!("{} ({tz})", utc.with_timezone(&zone).format(pattern)),
        Err(_) => format!("{} (UTC)", utc.format(pattern)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat<'a>() -> CallContext<'a> {
        CallContext {
            session_key: "telegram:42",
            channel: "telegram",
            chat_id: "42",
            in_cron: false,
            default_tz: "UTC",
            bot: "alpha",
            limits: Limits::default(),
        }
    }

    const NOW: i64 = 1_795_000_000_000;

    fn add(ws: &Path, ctx: &CallContext<'_>, schedule: Value) -> String {
        let mut args = json!({"action": "add", "message": "喝水 💧 提醒"});
        for (key, value) in schedule.as_object().unwrap() {
            args[key] = value.clone();
        }
        run(ws, ctx, &args, NOW)
    }

    #[test]
    fn an_every_seconds_that_overflows_or_is_under_the_minimum_is_refused_and_nothing_stored() {
        let ws = tempfile::tempdir().unwrap();
        let range = "Error: every_seconds {} is out of range: it must be between 60 and \
                     3153600000 seconds (the shortest period is tools.cron.minIntervalS)";
        for (every, shown) in [
            (json!(2_066_035_336_255_469_781_i64), "2066035336255469781"),
            (json!(u64::MAX), "9223372036854775807"),
            (json!(1e300), "9223372036854775807"),
            (json!(-5), "-5"),
            (json!(59), "59"),
            (json!(3_153_600_001_i64), "3153600001"),
        ] {
            let refused = add(ws.path(), &chat(), json!({"every_seconds": every}));
            assert_eq!(refused, range.replace("{}", shown), "{every}");
        }
        assert!(store::load(ws.path()).unwrap().jobs.is_empty());
        let fast = CallContext {
            limits: Limits {
                min_interval_s: 5,
                ..Limits::default()
            },
            ..chat()
        };
        assert!(
            add(ws.path(), &fast, json!({"every_seconds": 5}))
                .starts_with("Created job '喝水 💧 提醒'")
        );
        let hundred_years = add(
            ws.path(),
            &chat(),
            json!({"every_seconds": 3_153_600_000_i64}),
        );
        assert!(hundred_years.starts_with("Created job"), "{hundred_years}");
        let jobs = store::load(ws.path()).unwrap().jobs;
        assert_eq!(jobs[0].schedule.every_ms, Some(5_000));
        assert_eq!(jobs[1].state.next_run_at_ms, Some(NOW + 3_153_600_000_000));
    }

    #[test]
    fn a_cron_expression_firing_faster_than_the_minimum_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let every_two_seconds = json!({"cron_expr": "* * * * * */2", "tz": "Asia/Tokyo"});
        assert_eq!(
            add(ws.path(), &chat(), every_two_seconds.clone()),
            "Error: cron expression '* * * * * */2' runs 2 s apart; the shortest period is 60 s \
             (tools.cron.minIntervalS)"
        );
        // Twice in one minute, once a day: the gap inside the pair counts.
        let twice = add(ws.path(), &chat(), json!({"cron_expr": "0 9 * * * 0,30"}));
        assert!(twice.contains("runs 30 s apart"), "{twice}");
        assert!(store::load(ws.path()).unwrap().jobs.is_empty());
        let every_minute = add(ws.path(), &chat(), json!({"cron_expr": "* * * * *"}));
        assert!(every_minute.starts_with("Created job"), "{every_minute}");
        let fast = CallContext {
            limits: Limits {
                min_interval_s: 1,
                ..Limits::default()
            },
            ..chat()
        };
        assert!(add(ws.path(), &fast, every_two_seconds).starts_with("Created job"));
    }

    #[test]
    fn an_at_in_the_past_or_past_the_calendar_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        for (at, expected) in [
            (
                "0001-01-01T00:00:00",
                "is in the past: a one-time job needs a time ahead",
            ),
            (
                "2020-02-29T12:00:00+08:00",
                "is in the past: a one-time job needs a time ahead",
            ),
            (
                "9999-12-31T23:59:59-14:00",
                "is out of range: the latest time is 9999-12-31T23:59:59Z",
            ),
        ] {
            assert_eq!(
                add(ws.path(), &chat(), json!({"at": at})),
                format!("Error: at '{at}' {expected}")
            );
        }
        assert!(
            add(ws.path(), &chat(), json!({"at": "+275760-09-13T00:00:00"}))
                .starts_with("Error: invalid ISO datetime format")
        );
        assert!(store::load(ws.path()).unwrap().jobs.is_empty());
        let last = add(ws.path(), &chat(), json!({"at": "9999-12-31T23:59:59Z"}));
        assert!(last.starts_with("Created job"), "{last}");
        assert_eq!(
            timing(&store::load(ws.path()).unwrap().jobs[0].schedule, "UTC"),
            "at 9999-12-31T23:59:59+00:00 (UTC)"
        );
    }

    #[test]
    fn a_chat_holds_at_most_max_jobs_per_chat_and_other_chats_and_bots_are_not_counted() {
        let ws = tempfile::tempdir().unwrap();
        let capped = CallContext {
            limits: Limits {
                max_jobs_per_chat: 3,
                ..Limits::default()
            },
            ..chat()
        };
        for _ in 0..3 {
            assert!(add(ws.path(), &capped, json!({"every_seconds": 3600})).starts_with("Created"));
        }
        assert_eq!(
            add(ws.path(), &capped, json!({"cron_expr": "0 9 * * *"})),
            "Error: this chat already has 3 scheduled jobs, the most allowed \
             (tools.cron.maxJobsPerChat is 3); remove one first (action='remove')"
        );
        let other_chat = CallContext {
            session_key: "telegram:43",
            chat_id: "43",
            ..capped
        };
        let beta = CallContext {
            bot: "beta",
            ..capped
        };
        assert!(add(ws.path(), &other_chat, json!({"every_seconds": 3600})).starts_with("Created"));
        assert!(add(ws.path(), &beta, json!({"every_seconds": 3600})).starts_with("Created"));
        let id = store::load(ws.path()).unwrap().jobs[0].id.clone();
        let removed = run(
            ws.path(),
            &capped,
            &json!({"action": "remove", "job_id": id}),
            NOW,
        );
        assert_eq!(removed, format!("Removed job {id}"));
        assert!(
            add(ws.path(), &capped, json!({"at": "2030-01-01T08:00:00"})).starts_with("Created")
        );
        assert_eq!(store::load(ws.path()).unwrap().jobs.len(), 5);
    }

    #[test]
    fn a_bot_lists_and_removes_only_its_own_jobs_and_those_of_no_bot() {
        let ws = tempfile::tempdir().unwrap();
        let beta = CallContext {
            bot: "beta",
            ..chat()
        };
        assert!(add(ws.path(), &chat(), json!({"every_seconds": 3600})).starts_with("Created"));
        let jobs = store::load(ws.path()).unwrap().jobs;
        assert_eq!(jobs[0].bot.as_deref(), Some("alpha"));
        let id = jobs[0].id.clone();
        let list = json!({"action": "list"});
        assert!(run(ws.path(), &chat(), &list, NOW).contains(&id));
        assert_eq!(run(ws.path(), &beta, &list, NOW), "No scheduled jobs.");
        let remove = json!({"action": "remove", "job_id": id});
        assert_eq!(
            run(ws.path(), &beta, &remove, NOW),
            format!("Job {id} not found")
        );
        assert_eq!(store::load(ws.path()).unwrap().jobs.len(), 1);
        // A legacy job (no bot) is seen by every bot of the workspace.
        store::update(ws.path(), |file| {
            file.jobs[0].bot = None;
            (true, ())
        })
        .unwrap();
        assert!(run(ws.path(), &beta, &list, NOW).contains("喝水 💧 提醒"));
        assert_eq!(
            run(ws.path(), &beta, &remove, NOW),
            format!("Removed job {id}")
        );
    }

    #[test]
    fn add_binds_the_job_to_the_chat_and_writes_upstreams_format() {
        let ws = tempfile::tempdir().unwrap();
        let args = json!({"action": "add", "message": "stand up and stretch", "cron_expr": "0 8 * * *", "tz": "Europe/Berlin"});
        let reply = run(ws.path(), &chat(), &args, NOW);
        let jobs = store::load(ws.path()).unwrap();
        let job = &jobs.jobs[0];
        assert_eq!(
            reply,
            format!("Created job 'stand up and stretch' (id: {})", job.id)
        );
        assert_eq!(job.id.len(), 8);
        assert_eq!(
            job.payload.route(),
            Some(("telegram:42".into(), "telegram".into(), "42".into()))
        );
        assert_eq!(job.schedule.tz.as_deref(), Some("Europe/Berlin"));
        assert!(job.state.next_run_at_ms.unwrap() > NOW);

        let listed = run(ws.path(), &chat(), &json!({"action": "list"}), NOW);
        assert!(
            listed.starts_with("Scheduled jobs:\n- stand up and stretch (id: "),
            "{listed}"
        );
        assert!(
            listed.contains(", cron: 0 8 * * * (Europe/Berlin))"),
            "{listed}"
        );
        assert!(listed.contains("  Next run: 20"), "{listed}");
        assert!(listed.contains("+01:00 (Europe/Berlin)"), "{listed}");

        let removed = run(
            ws.path(),
            &chat(),
            &json!({"action": "remove", "job_id": job.id}),
            NOW,
        );
        assert_eq!(removed, format!("Removed job {}", job.id));
        assert_eq!(
            run(ws.path(), &chat(), &json!({"action": "list"}), NOW),
            "No scheduled jobs."
        );
        assert_eq!(
            run(
                ws.path(),
                &chat(),
                &json!({"action": "remove", "job_id": "nope"}),
                NOW
            ),
            "Job nope not found"
        );
    }

    #[test]
    fn add_refuses_what_upstream_refuses_with_its_text() {
        let ws = tempfile::tempdir().unwrap();
        let cases = [
            (
                json!({"action": "add", "every_seconds": 60}),
                "Error: cron action='add' requires a non-empty 'message' parameter describing what to do when the job triggers (e.g. the reminder text). Retry including message=\"...\".",
            ),
            (
                json!({"action": "add", "message": "m", "every_seconds": 60, "tz": "UTC"}),
                "Error: tz can only be used with cron_expr",
            ),
            (
                json!({"action": "add", "message": "m", "cron_expr": "0 8 * * *", "tz": "Mars/Base"}),
                "Error: unknown timezone 'Mars/Base'",
            ),
            (
                json!({"action": "add", "message": "m", "at": "tomorrow"}),
                "Error: invalid ISO datetime format 'tomorrow'. Expected format: YYYY-MM-DDTHH:MM:SS",
            ),
            (
                json!({"action": "add", "message": "m"}),
                "Error: either every_seconds, cron_expr, or at is required",
            ),
            (
                json!({"action": "remove"}),
                "Error: job_id is required for remove",
            ),
            (json!({"action": "pause"}), "Unknown action: pause"),
        ];
        for (args, expected) in cases {
            assert_eq!(run(ws.path(), &chat(), &args, NOW), expected, "{args}");
        }
        let bad_expr = run(
            ws.path(),
            &chat(),
            &json!({"action": "add", "message": "m", "cron_expr": "99 * * * *"}),
            NOW,
        );
        assert!(
            bad_expr.starts_with("Error: invalid cron expression '99 * * * *': "),
            "{bad_expr}"
        );
        let no_chat = CallContext {
            session_key: "",
            ..chat()
        };
        assert_eq!(
            run(
                ws.path(),
                &no_chat,
                &json!({"action": "add", "message": "m", "every_seconds": 5}),
                NOW
            ),
            "Error: scheduled cron jobs must be created from a chat session"
        );
        let in_cron = CallContext {
            in_cron: true,
            ..chat()
        };
        assert_eq!(
            run(
                ws.path(),
                &in_cron,
                &json!({"action": "add", "message": "m", "every_seconds": 5}),
                NOW
            ),
            "Error: cannot schedule new jobs from within a cron job execution"
        );
        assert!(store::load(ws.path()).unwrap().jobs.is_empty());
    }

    #[test]
    fn a_naive_at_is_in_the_agents_zone_and_runs_once() {
        let ws = tempfile::tempdir().unwrap();
        let tokyo = CallContext {
            default_tz: "Asia/Tokyo",
            ..chat()
        };
        let args = json!({"action": "add", "message": "call mum", "at": "2030-01-02T09:30:00"});
        assert!(run(ws.path(), &tokyo, &args, NOW).starts_with("Created job 'call mum'"));
        let job = &store::load(ws.path()).unwrap().jobs[0];
        let expected = DateTime::parse_from_rfc3339("2030-01-02T00:30:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(job.schedule.at_ms, Some(expected));
        assert!(job.delete_after_run);
        assert_eq!(
            timing(&job.schedule, "Asia/Tokyo"),
            "at 2030-01-02T09:30:00+09:00 (Asia/Tokyo)"
        );
    }

    #[test]
    fn system_jobs_are_listed_but_never_removed() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("cron")).unwrap();
        std::fs::write(
            store::jobs_path(ws.path()),
            r#"{"version":1,"jobs":[{"id":"dream","name":"dream","schedule":{"kind":"every","everyMs":7200000},
               "payload":{"kind":"system_event","message":"dream"}}]}"#,
        )
        .unwrap();
        let listed = run(ws.path(), &chat(), &json!({"action": "list"}), NOW);
        assert_eq!(
            listed,
            "Scheduled jobs:\n- dream (id: dream, every 2h)\n  Purpose: Dream memory consolidation for long-term memory.\n  Protected: visible for inspection, but cannot be removed."
        );
        assert_eq!(
            run(
                ws.path(),
                &chat(),
                &json!({"action": "remove", "job_id": "dream"}),
                NOW
            ),
            "Cannot remove job `dream`.\nThis is a system-managed Dream memory consolidation job for long-term memory.\nIt remains visible so you can inspect it, but it cannot be removed."
        );
        assert_eq!(store::load(ws.path()).unwrap().jobs.len(), 1);
    }

    /// nanobot 0.3.5's gateway registers `heartbeat` (every 30 min) and `dream` (every 2 h)
    /// at start, so its `list` on a fresh workspace shows both, soonest first.
    #[test]
    fn a_fresh_workspace_lists_the_system_jobs_soonest_first_with_a_cjk_job() {
        let ws = tempfile::tempdir().unwrap();
        let (heartbeat, dream) = (HeartbeatConfig::default(), DreamConfig::default());
        let system = Some(SystemJobs {
            heartbeat: &heartbeat,
            dream: &dream,
        });
        let list = json!({"action": "list"});
        let listed = run_with(ws.path(), &chat(), system, &list, NOW);
        let next = |ms: i64| timestamp(NOW + ms, "UTC");
        let heartbeat_entry = format!(
            "- heartbeat (id: heartbeat, every 30m)\n  Purpose: System-managed internal job.\n  \
             Protected: visible for inspection, but cannot be removed.\n  Next run: {}",
            next(1_800_000)
        );
        let dream_entry = format!(
            "- dream (id: dream, every 2h)\n  Purpose: Dream memory consolidation for long-term \
             memory.\n  Protected: visible for inspection, but cannot be removed.\n  Next run: {}",
            next(7_200_000)
        );
        assert_eq!(
            listed,
            format!("Scheduled jobs:\n{heartbeat_entry}\n{dream_entry}")
        );
        assert!(
            store::load(ws.path()).unwrap().jobs.is_empty(),
            "listing writes nothing; the scheduler registers them"
        );
        let add =
            json!({"action": "add", "message": "喝水 💧 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום", "every_seconds": 60});
        let created = run(ws.path(), &chat(), &add, NOW);
        let id = store::load(ws.path()).unwrap().jobs[0].id.clone();
        assert_eq!(
            created,
            format!("Created job '喝水 💧 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום' (id: {id})")
        );
        let listed = run_with(ws.path(), &chat(), system, &list, NOW);
        assert_eq!(
            listed,
            format!(
                "Scheduled jobs:\n- 喝水 💧 👩‍👩‍👧‍👦 🇨🇳 e\u{301} שלום (id: {id}, every 1m)\n  \
                 Next run: {}\n{heartbeat_entry}\n{dream_entry}",
                next(60_000)
            )
        );
        assert_eq!(run(ws.path(), &chat(), &list, NOW).lines().count(), 3);
    }

    /// nanobot 0.3.5's `CronTool.validate_params` texts.
    #[test]
    fn per_action_requirements_are_validation_errors() {
        assert_eq!(
            validate(&json!({"action": "add"})),
            ["message is required when action='add'"]
        );
        assert_eq!(
            validate(&json!({"action": "add", "message": "  "})),
            ["message is required when action='add'"]
        );
        assert_eq!(
            validate(&json!({"action": "remove", "job_id": ""})),
            ["job_id is required when action='remove'"]
        );
        assert!(validate(&json!({"action": "add", "message": "提醒 ⏰"})).is_empty());
        assert!(validate(&json!({"action": "list"})).is_empty());
        assert_eq!(parameters()["additionalProperties"], json!(false));
    }
}
