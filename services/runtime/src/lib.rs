//! Process plumbing shared by every nanobot service: config loading, telemetry, shutdown,
//! NATS (JetStream streams, trace-carrying publish/request helpers), Redis and the health probe.
//! No business logic lives here.
//!
//! # Layout
//! - [`config`]: nanobot's `config.json` schema + fleet sections, env overrides, validation.
//! - [`telemetry`]: tracing subscriber, OTLP export, W3C trace context in NATS headers.
//! - [`shutdown`]: SIGINT/SIGTERM handling and the drain deadline.
//! - [`bus`]: NATS connection, streams, typed requests and replies; [`payloads`]: replies
//!   over the broker's message limit, through the object store.
//! - [`store`]: Redis connection.
//! - [`sse`]: server-sent events from a byte stream, split anywhere (the one SSE reader);
//!   [`utf8`]: bytes in pieces to whole characters.
//! - [`fs`]: files replaced whole (temp file, fsync, rename).
//! - [`lease`]: the one Redis lease with fencing tokens (sessions, cron leader, memory lock,
//!   Telegram poller).
//! - [`health`]: HTTP `/health` + `/ready` and the fleet status responder.
//! - [`cli`]: the flags every binary shares and the launcher.
//! - [`json_order`]: the order a JSON text writes its keys in (our maps sort them).
//! - [`legacy_exec`]: the last release's `write_stdin` calls migrated to `exec_session` as
//!   0.3.5 migrates them (executors and replay).
//! - [`service`]: the shared start-up sequence.
//! - `testsuite` (feature `testsuite`): real `nats-server`, `redis-server` and fleet binaries
//!   as processes for tests and benchmarks.
#![forbid(unsafe_code)]

pub mod bot_registry;
pub mod bus;
pub mod cli;
pub mod config;
pub mod dependency_metrics;
pub mod fs;
pub mod health;
pub mod json_order;
pub mod lease;
pub mod legacy_exec;
pub mod metrics;
pub mod payloads;
pub mod pyfmt;
pub mod service;
pub mod shutdown;
pub mod skills_dir;
pub mod sse;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testsuite")]
pub mod testsuite;
pub mod usage;
pub mod utf8;

/// The fleet's version, reported by every service.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
