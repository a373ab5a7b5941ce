//! Agent logic shared by the agent runner, memory and cron roles: sessions in Redis, history
//! rules, the context builder and skills, LLM providers, the NATS tool client and the runner
//! loop. No NATS consumers or process wiring live here.
//!
//! # Layout
//! - [`session`]: sessions in Redis in nanobot's row format.
//! - [`history`]: replay and save rules.
//! - [`context`], [`skills`]: the system prompt and messages; [`attachment`]: bounded reading
//!   of a message's attachments.
//! - [`provider`]: OpenAI-compatible and native Anthropic clients behind [`provider::Provider`].
//! - [`registry`], [`resolve`]: the vendor registry and endpoint resolution.
//! - [`args`]: tool-call argument parsing and repair.
//! - [`tools`]: tool discovery and calls over NATS; [`tool_results`]: oversized results saved
//!   under the workspace.
//! - [`runner`]: the LLM/tool loop; [`hooks`]: its lifecycle hooks; [`checkpoint`]: crash
//!   recovery of interrupted turns.
//! - [`memory`]: `memory/history.jsonl` and the raw archive format.
//! - [`heartbeat`]: the heartbeat's rules (active tasks, target chat, prompt, notification gate).
//! - [`subagent`]: the `spawn` tool's rules (task ids, texts, a subagent's prompt and tools);
//!   [`message_tool`]: the `message` tool's spec (both tools are served by the agent runner).
//! - [`clock`]: the rows' timestamp.
//! - [`pairing`]: pairing codes and approvals of chat-channel senders (Redis, per bot).
#![forbid(unsafe_code)]

pub mod args;
pub mod attachment;
pub mod checkpoint;
pub mod clock;
pub mod context;
pub mod goal;
pub mod heartbeat;
pub mod history;
pub mod hooks;
pub mod memory;
pub mod message_tool;
pub mod pairing;
pub mod provider;
pub mod registry;
pub mod resolve;
pub mod runner;
pub mod session;
pub mod skills;
pub mod subagent;
pub mod tool_results;
pub mod tools;
