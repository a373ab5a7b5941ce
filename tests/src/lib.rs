//! Test support for the nanobot fleet: a scripted OpenAI/Anthropic-compatible LLM server,
//! a harness that runs real `nats-server`, `redis-server` and service binaries, and the
//! end-to-end suite built on them.
//!
//! # Layout
//! - [`scripted_llm`]: the scripted LLM HTTP server ([`scripted_llm::ScriptedLlm`],
//!   [`scripted_llm::Reply`]).
//! - [`telegram_fake`]: a Telegram Bot API fake over real HTTP ([`telegram_fake::TelegramFake`],
//!   [`telegram_fake::FakeBot`], [`telegram_fake::Incoming`]): several bots, long polling with
//!   409 for a second poller, HTML checks, scripted 429s, recorded calls.
//! - [`mail_servers`]: a real IMAP server (dovecot) and SMTP server (aiosmtpd) on loopback,
//!   started once per test binary, for the email channel.
//! - [`trace_store`]: a real trace store (Arize Phoenix) on loopback, started once per test
//!   binary, that the tracing tests export to and query.
//! - [`slack_fake`]: a Slack fake over real HTTP and WebSocket ([`slack_fake::SlackFake`]): the
//!   Web API methods the channel uses, Socket Mode envelopes and acknowledgements, signed
//!   Events API requests ([`slack_fake::signed_post`]).
//! - [`discord_fake`]: a Discord fake ([`discord_fake::DiscordFake`]): REST and the gateway
//!   WebSocket of one bot token, recorded posts and sessions.
//! - [`fake_server`]: what the platform fakes share: a loopback server stopped with the last
//!   clone of its fake, and state behind one lock whose changes wake the waiters.
//! - [`drip`]: response bodies sent 1 to 3 bytes at a time (the scripted LLM's and the
//!   Telegram fake's, when asked).
//! - [`harness`]: real processes killed on drop ([`harness::Nats`], [`harness::Redis`],
//!   [`harness::ServiceProc`], [`harness::Fleet`]) and waiting helpers.
//! - `e2e` (tests only): end-to-end tests of the whole fleet.
//! - `bin/mock_llm.rs`: `nanobot-mock-llm`, a standalone fast OpenAI-compatible server.
#![forbid(unsafe_code)]

pub mod dingtalk_fake;
pub mod discord_fake;
pub mod drip;
pub mod fake_server;
pub mod feishu_fake;
pub mod harness;
pub mod mail_servers;
pub mod onebot_fake;
pub mod otlp_collector;
pub mod qq_fake;
pub mod scripted_llm;
pub mod slack_fake;
pub mod telegram_fake;
pub mod trace_store;
pub mod wecom_fake;

#[cfg(test)]
mod e2e;
