//! `nanobot cron list | add | remove | enable | run`: operators' view of a bot's
//! `cron/jobs.json`, through the same store and rules as the `cron` tool (locked writes,
//! upstream's format and messages). The cron leader fires what these change.

use clap::Subcommand;
use serde_json::{Value, json};

use nanobot_cron::limits::Limits;
use nanobot_cron::store::{self, SYSTEM_EVENT};
use nanobot_cron::{schedule, tool};
use nanobot_runtime::config::{BotSpec, Config};

/// Cron subcommands.
#[derive(Debug, Subcommand)]
pub enum CronAction {
    /// List every job, disabled ones included.
    List,
    /// Add a job; it runs in the operator's `cli:direct` session, or with `--deliver` in
    /// session `<channel>:<to>`, answering that chat.
    Add {
        /// Instruction for the agent when the job triggers.
        #[arg(long, short = 'm')]
        message: String,
        /// Name (default: the first 30 characters of the message).
        #[arg(long, short = 'n')]
        name: Option<String>,
        /// Run every N seconds.
        #[arg(long, short = 'e')]
        every: Option<i64>,
        /// Cron expression (five fields, or six with the seconds last).
        // No `-c`: that is `--config` (global, as upstream); clap panics on the clash.
        #[arg(long = "cron")]
        cron_expr: Option<String>,
        /// IANA time zone of `--cron` (default `agents.defaults.timezone`).
        #[arg(long)]
        tz: Option<String>,
        /// Run once at this ISO datetime (naive: the agent's time zone).
        #[arg(long)]
        at: Option<String>,
        /// Deliver the job's replies to chat `--to` (upstream's `--deliver`): the job belongs
        /// to that chat's session.
        #[arg(long, short = 'd', requires = "to")]
        deliver: bool,
        /// Channel of the `--deliver` chat (default `cli`).
        #[arg(long, requires = "deliver")]
        channel: Option<String>,
        /// Chat the job delivers to.
        #[arg(long, requires = "deliver")]
        to: Option<String>,
    },
    /// Remove a job (system jobs are refused).
    Remove {
        /// Job id.
        id: String,
    },
    /// Enable a job (or disable it with `--disable`).
    Enable {
        /// Job id.
        id: String,
        /// Disable instead.
        #[arg(long)]
        disable: bool,
    },
    /// Make a job due now: the cron leader fires it at its next tick.
    Run {
        /// Job id.
        id: String,
    },
}

/// Lays bot `id`'s registry entry over `cfg` when the config file does not have it (a bot
/// added live): its workspace and model; its channels, and their secret references, are left
/// out (the cron commands need none of them). A bot the registry does not hold is left to
/// [`run`] to refuse.
pub async fn with_live_bot(
    cfg: &mut Config,
    js: &async_nats::jetstream::Context,
    id: &str,
) -> anyhow::Result<()> {
    use nanobot_runtime::bot_registry::{self, Change};
    let store = bot_registry::open(js).await?;
    let Some(bytes) = store.get(id).await? else {
        return Ok(());
    };
    let mut raw: Value = serde_json::from_slice(&bytes)?;
    if let Some(map) = raw.as_object_mut() {
        map.remove("channels");
    }
    let env = std::env::vars().collect();
    *cfg =
        bot_registry::apply(cfg, &Change::Put(id.into(), raw), &env).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// Runs `action` on `bot`'s jobs (default: the first bot); prints the result, returns the
/// exit code (1 when refused).
pub fn run(cfg: &Config, bot: Option<&str>, action: &CronAction) -> anyhow::Result<i32> {
    let bots = cfg.bots();
    let spec = match bot {
        Some(id) => bots.iter().find(|b| b.id == id),
        None => bots.first(),
    };
    let Some(spec) = spec else {
        anyhow::bail!("unknown bot {:?}", bot.unwrap_or_default());
    };
    let tz = cfg.agents.defaults.timezone.as_str();
    let limits = Limits::from(&cfg.tools.cron);
    let text = execute_with(spec, tz, limits, action, store::now_ms())?;
    println!("{text}");
    let refused =
        text.starts_with("Error") || text.starts_with("Cannot") || text.ends_with("not found");
    Ok(i32::from(refused))
}

#[cfg(test)]
fn execute(bot: &BotSpec, tz: &str, action: &CronAction, now: i64) -> anyhow::Result<String> {
    execute_with(bot, tz, Limits::default(), action, now)
}

/// Runs `action` on `bot`'s jobs; `add` and `remove` go through the `cron` tool as `bot`
/// (its bounds, its jobs only).
fn execute_with(
    bot: &BotSpec,
    tz: &str,
    limits: Limits,
    action: &CronAction,
    now: i64,
) -> anyhow::Result<String> {
    let workspace = &bot.workspace;
    let bot_id = bot.id.as_str();
    Ok(match action {
        CronAction::List => list(&store::load(workspace)?, tz),
        CronAction::Add {
            message,
            name,
            every,
            cron_expr,
            tz: zone,
            at,
            deliver,
            channel,
            to,
        } => {
            let (channel, to) = match (deliver, to) {
                (true, Some(to)) => (channel.as_deref().unwrap_or("cli"), to.as_str()),
                _ => ("cli", "direct"),
            };
            let session_key = format!("{channel}:{to}");
            let call = tool::CallContext {
                session_key: &session_key,
                channel,
                chat_id: to,
                in_cron: false,
                default_tz: tz,
                bot: bot_id,
                limits,
            };
            let mut args = json!({"action": "add", "message": message});
            for (key, value) in [
                ("name", name.clone()),
                ("cron_expr", cron_expr.clone()),
                ("tz", zone.clone()),
                ("at", at.clone()),
            ] {
                if let Some(v) = value {
                    args[key] = Value::String(v);
                }
            }
            if let Some(secs) = every {
                args["every_seconds"] = json!(secs);
            }
            tool::run(workspace, &call, &args, now)
        }
        CronAction::Remove { id } => {
            let call = tool::CallContext {
                session_key: "",
                channel: "",
                chat_id: "",
                in_cron: false,
                default_tz: tz,
                bot: bot_id,
                limits,
            };
            tool::run(
                workspace,
                &call,
                &json!({"action": "remove", "job_id": id}),
                now,
            )
        }
        CronAction::Enable { id, disable } => set_enabled(workspace, id, *disable, now)?,
        CronAction::Run { id } => run_now(workspace, id, now)?,
    })
}

/// Enables (`disable`: disables) job `id`, computing its next run.
fn set_enabled(
    workspace: &std::path::Path,
    id: &str,
    disable: bool,
    now: i64,
) -> anyhow::Result<String> {
    store::update(workspace, |jobs| {
        let Some(job) = jobs.jobs.iter_mut().find(|j| j.id == id) else {
            return (false, format!("Job {id} not found"));
        };
        job.enabled = !disable;
        job.state.next_run_at_ms = if disable {
            None
        } else {
            schedule::next_run(&job.schedule, now)
        };
        job.updated_at_ms = now;
        let verb = if disable { "Disabled" } else { "Enabled" };
        (true, format!("{verb} job {id}"))
    })
}

/// Makes job `id` due now (a system-managed job is refused).
fn run_now(workspace: &std::path::Path, id: &str, now: i64) -> anyhow::Result<String> {
    store::update(workspace, |jobs| {
        let Some(job) = jobs.jobs.iter_mut().find(|j| j.id == id) else {
            return (false, format!("Job {id} not found"));
        };
        if job.payload.kind == SYSTEM_EVENT {
            return (
                false,
                format!("Cannot run job `{id}` here: it is system-managed"),
            );
        }
        job.enabled = true;
        job.state.next_run_at_ms = Some(now);
        (
            true,
            format!("Job {id} is due now; the cron leader fires it at its next tick"),
        )
    })
}

fn list(jobs: &store::JobsFile, tz: &str) -> String {
    if jobs.jobs.is_empty() {
        return "No scheduled jobs.".into();
    }
    let mut lines = vec!["Scheduled jobs:".to_string()];
    for job in &jobs.jobs {
        let zone = job.schedule.tz.as_deref().unwrap_or(tz);
        let state = if job.enabled { "" } else { " [disabled]" };
        lines.push(format!(
            "- {} (id: {}, {}){state}",
            job.name,
            job.id,
            tool::timing(&job.schedule, zone)
        ));
        if let Some((session, _, _)) = job.payload.route() {
            lines.push(format!("  Session: {session}"));
        }
        if let Some(owner) = &job.bot {
            lines.push(format!("  Bot: {owner}"));
        }
        if let Some(next) = job.state.next_run_at_ms {
            lines.push(format!("  Next run: {}", tool::timestamp(next, zone)));
        }
        if let Some(status) = &job.state.last_status {
            lines.push(format!(
                "  Last status: {status} ({} runs kept)",
                job.state.run_history.len()
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(dir: &std::path::Path) -> BotSpec {
        BotSpec {
            id: "default".into(),
            workspace: dir.to_path_buf(),
            model: "m".into(),
            provider: "auto".into(),
        }
    }

    #[test]
    fn operators_add_list_disable_run_and_remove_jobs() {
        let ws = tempfile::tempdir().unwrap();
        let bot = bot(ws.path());
        let added = execute(
            &bot,
            "UTC",
            &CronAction::Add {
                message: "water the plants".into(),
                name: Some("plants".into()),
                every: Some(3600),
                cron_expr: None,
                tz: None,
                at: None,
                deliver: true,
                channel: Some("telegram".into()),
                to: Some("42".into()),
            },
            1_000,
        )
        .unwrap();
        let id = store::load(ws.path()).unwrap().jobs[0].id.clone();
        assert_eq!(added, format!("Created job 'plants' (id: {id})"));
        let listed = execute(&bot, "UTC", &CronAction::List, 1_000).unwrap();
        assert!(
            listed.contains(&format!(
                "- plants (id: {id}, every 1h)\n  Session: telegram:42"
            )),
            "{listed}"
        );

        execute(
            &bot,
            "UTC",
            &CronAction::Enable {
                id: id.clone(),
                disable: true,
            },
            2_000,
        )
        .unwrap();
        assert!(
            execute(&bot, "UTC", &CronAction::List, 2_000)
                .unwrap()
                .contains("[disabled]")
        );
        execute(&bot, "UTC", &CronAction::Run { id: id.clone() }, 3_000).unwrap();
        let job = store::load(ws.path()).unwrap().jobs[0].clone();
        assert!(job.enabled);
        assert_eq!(job.state.next_run_at_ms, Some(3_000));

        assert_eq!(
            execute(&bot, "UTC", &CronAction::Remove { id: id.clone() }, 4_000).unwrap(),
            format!("Removed job {id}")
        );
        assert_eq!(
            execute(&bot, "UTC", &CronAction::List, 4_000).unwrap(),
            "No scheduled jobs."
        );
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        action: CronAction,
    }

    #[test]
    fn add_takes_upstreams_deliver_and_to_options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| Cli::try_parse_from([&["cron", "add"], args].concat());
        assert!(
            parse(&["-m", "x", "-e", "60", "--to", "42"]).is_err(),
            "--to needs --deliver"
        );
        assert!(
            parse(&["-m", "x", "-e", "60", "-d"]).is_err(),
            "--deliver needs --to"
        );
        let ws = tempfile::tempdir().unwrap();
        let bot = bot(ws.path());
        for (args, session) in [
            (&["-m", "x", "-e", "60"][..], "cli:direct"),
            (
                &[
                    "-m",
                    "x",
                    "-e",
                    "60",
                    "-d",
                    "--channel",
                    "telegram",
                    "--to",
                    "42",
                ][..],
                "telegram:42",
            ),
        ] {
            let action = parse(args).unwrap().action;
            execute(&bot, "UTC", &action, 1_000).unwrap();
            let jobs = store::load(ws.path()).unwrap();
            let job = jobs.jobs.last().unwrap();
            assert_eq!(job.payload.session_key.as_deref(), Some(session));
        }
    }
}
