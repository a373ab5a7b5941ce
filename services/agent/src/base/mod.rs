//! The ground floor: what every layer above uses, and which imports nothing above it (only
//! other files of this floor, and the other crates).
//!
//! - `deps`: [`deps::Deps`], what a runner's handlers, sessions and turns share.
//! - `command`: slash commands parsed, and what a message is ([`command::Kind`], `classify`).
//! - `input`: a decoded, classified chat message ([`input::Incoming`]) and a turn's input
//!   ([`input::TurnInput`]).
//! - `bots`: per-bot state: session store, tool client, models, prompt builder.
//! - `served_tools`: the specs of the tools a turn's runner serves itself.
//! - `lease`: session leases with fencing tokens (the keys; waiting for one is `crate::session`'s).
//! - `mailbox`: reading a session's messages from the inbound stream past a sequence.
//! - `outbox`: publishing replies, and replies committed but not yet published.
//! - `outcomes`: how watched turns ended (a cron fire records its run's status).
//! - `stop`: `/stop` across runners; `restart`: `/restart`.
//! - `error`: the agent's error type.

pub mod bots;
pub mod command;
pub mod deps;
pub mod error;
pub mod input;
pub mod lease;
pub mod mailbox;
pub mod outbox;
pub mod outcomes;
pub mod restart;
pub mod served_tools;
pub mod stop;
