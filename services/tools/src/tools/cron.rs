//! `cron`: reminders and recurring tasks in the bot's `cron/jobs.json`, bound to the chat that
//! made them ([`nanobot_cron::tool`]; the cron role fires them).

use serde_json::Value;

use nanobot_cron::tool::{self, CallContext};

use crate::registry::{Args, Tool, ToolContext, ToolOutput, blocking};

/// The `cron` tool; naive times and expressions without `tz` use the agent's time zone.
#[derive(Debug)]
pub struct Cron {
    default_tz: String,
    description: String,
}

impl Cron {
    /// Returns the tool for an agent in `default_tz` (`agents.defaults.timezone`).
    pub fn new(default_tz: &str) -> Self {
        Self {
            default_tz: default_tz.to_string(),
            description: tool::description(default_tz),
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

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        let workspace = ctx.sandbox.root().to_path_buf();
        let session_key = ctx.session_key.clone();
        let origin = ctx.origin.clone();
        let default_tz = self.default_tz.clone();
        blocking(tool::NAME, move || {
            let call = CallContext {
                session_key: &session_key,
                channel: &origin.channel,
                chat_id: &origin.chat_id,
                in_cron: origin.in_cron,
                default_tz: &default_tz,
            };
            let now = nanobot_cron::store::now_ms();
            let text = tool::run(&workspace, &call, &Value::Object(args), now);
            if text.starts_with("Error") {
                ToolOutput::error(text)
            } else {
                ToolOutput::text(text)
            }
        })
        .await
    }
}
