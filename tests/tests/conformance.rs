//! Conformance with nanobot 0.3.5, table-driven: each upstream area is one module and one
//! table in `tests/conformance/` (`<area>.rs` + `<area>.json`), checked by the shared
//! `harness`. See `tests/conformance/README.md` for how a case is added.

#[path = "../conformance/harness.rs"]
mod harness;

#[path = "../conformance/telegram_html.rs"]
mod telegram_html;

#[path = "../conformance/context.rs"]
mod context;

#[path = "../conformance/config_unknown_keys.rs"]
mod config_unknown_keys;

#[path = "../conformance/telegram_split.rs"]
mod telegram_split;

#[path = "../conformance/cron_schedule.rs"]
mod cron_schedule;

#[path = "../conformance/tool_params.rs"]
mod tool_params;

#[path = "../conformance/reasoning.rs"]
mod reasoning;

#[path = "../conformance/history.rs"]
mod history;

#[path = "../conformance/tool_definitions.rs"]
mod tool_definitions;

#[path = "../conformance/checkpoint.rs"]
mod checkpoint;

#[path = "../conformance/commands.rs"]
mod commands;

#[path = "../conformance/slack_mrkdwn.rs"]
mod slack_mrkdwn;

#[path = "../conformance/discord_split.rs"]
mod discord_split;

#[path = "../conformance/feishu_text.rs"]
mod feishu_text;

#[path = "../conformance/dingtalk_text.rs"]
mod dingtalk_text;

#[path = "../conformance/email_text.rs"]
mod email_text;
