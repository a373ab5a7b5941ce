//! Agent logic shared by the agent runner, memory and cron roles: sessions in Redis, history
//! rules, the context builder and skills, LLM providers, the NATS tool client and the runner
//! loop. No NATS consumers or process wiring live here.
//!
//! # Layout
//! - [`session`]: sessions in Redis in nanobot's row format.
//! - [`history`]: replay and save rules.
//! - [`context`], [`skills`]: the system prompt and messages.
//! - [`provider`], [`resolve`]: the OpenAI-compatible client and endpoint resolution.
//! - [`tools`]: tool discovery and calls over NATS.
//! - [`runner`]: the LLM/tool loop.
//! - [`memory`]: `memory/history.jsonl` and the raw archive format.
#![forbid(unsafe_code)]

pub mod context;
pub mod history;
pub mod memory;
pub mod provider;
pub mod resolve;
pub mod runner;
pub mod session;
pub mod skills;
pub mod tools;
