//! `cron`: reminders and recurring tasks in the bot's `cron/jobs.json`, bound to the chat that
//! made them ([`nanobot_cron::tool`]; the cron role fires them).

use serde_json::Value;

use nanobot_cron::limits::Limits;
use nanobot_cron::tool::{self, CallContext, SystemJobs};
use nanobot_runtime::config::{Config, DreamConfig, HeartbeatConfig};

use crate::registry::{Args, Tool, ToolContext, ToolOutput, blocking};

/// The `cron` tool; naive times and expressions without `tz` use the agent's time zone.
#[derive(Debug)]
pub struct Cron {
    default_tz: String,
    description: String,
    heartbeat: HeartbeatConfig,
    dream: DreamConfig,
    limits: Limits,
}

impl Cron {
    /// Returns the tool for `cfg`'s agents: their time zone (`agents.defaults.timezone`) and
    /// the system jobs the scheduler keeps (`gateway.heartbeat`, `agents.defaults.dream`);
    /// what may be scheduled (`tools.cron`).
    pub fn new(cfg: &Config) -> Self {
        let default_tz = &cfg.agents.defaults.timezone;
        Self {
            default_tz: default_tz.clone(),
            description: tool::description(default_tz),
            heartbeat: cfg.gateway.heartbeat.clone(),
            dream: cfg.agents.defaults.dream.clone(),
            limits: Limits::from(&cfg.tools.cron),
        }
    }
}

#[async_trait::async_trait]
impl Tool for Cron {
    fn name(&self) -> &str {
        tool::NAME
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        tool::parameters()
    }

    fn validate(&self, args: &Args) -> Vec<String> {
        tool::validate(&Value::Object(args.clone()))
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let workspace = ctx.sandbox.root().to_path_buf();
        let session_key = ctx.session_key.clone();
        let origin = ctx.origin.clone();
        let default_tz = self.default_tz.clone();
        let (heartbeat, dream) = (self.heartbeat.clone(), self.dream.clone());
        let limits = self.limits;
        blocking(tool::NAME, move || {
            let call = CallContext {
                session_key: &session_key,
                channel: &origin.channel,
                chat_id: &origin.chat_id,
                in_cron: origin.in_cron,
                default_tz: &default_tz,
                bot: &origin.bot,
                limits,
            };
            let now = nanobot_cron::store::now_ms();
            let system = SystemJobs {
                heartbeat: &heartbeat,
                dream: &dream,
            };
            let args = Value::Object(args);
            let text = tool::run_with(&workspace, &call, Some(system), &args, now);
            if text.starts_with("Error") {
                ToolOutput::error(text)
            } else {
                ToolOutput::text(text)
            }
        })
        .await
    }
}
