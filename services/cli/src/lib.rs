//! The `nanobot` command line: `onboard`, `agent` (one-shot or interactive, through the fleet),
//! `status`, `up`/`down` (the local fleet), `probe` (health checks for containers).
//!
//! # Layout
//! - `commands`: clap definitions and dispatch.
//! - `chat`: `nanobot agent` over inbound/outbound JetStream.
//! - `status`: fleet status from the status subject.
//! - `fleet`: `up` / `down`.
//! - `onboard`: config and workspace from `templates/`.
//! - `pairing`: `nanobot pairing list|approve|revoke` (chat-channel sender approvals).
//! - `sessions`: `nanobot sessions import` (upstream's JSONL sessions into Redis).
//! - `cron`: `nanobot cron list|add|remove|enable|run` (a bot's `cron/jobs.json`).
//! - `usage`: `nanobot usage [--bot B] [--since D]` (tokens per bot, day and model).
//! - `deploy`: `nanobot deploy nats-config|redis-acl` (per-role NATS users, Redis ACL).
#![forbid(unsafe_code)]

pub mod bots;
pub mod chat;
pub mod commands;
pub mod cron;
pub mod deploy;
pub mod fleet;
pub mod onboard;
pub mod pairing;
pub mod purge;
pub mod sessions;
pub mod status;
pub mod usage;
