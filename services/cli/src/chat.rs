//! `nanobot agent`: send a message through the fleet (inbound JetStream) and show the reply
//! (outbound JetStream) as it streams, one-shot with `-m` or as an interactive chat. The CLI is
//! a streaming channel: it asks the runner for stream deltas (`InboundMessage.stream`), shows
//! a spinner on a terminal until the first token, prints deltas as they come and completes
//! the line with the final reply. Its reply consumer survives NATS restarts (`replies`).
//!
//! # Layout
//! - `replies`: the resumable reply feed (ordered consumer recreated from the last sequence).
//! - `printer`: the spinner and the streamed reply on the terminal.

mod printer;
mod replies;

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use nanobot_proto::{InboundMessage, OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::bus::{self, Bus};
use nanobot_runtime::config::Config;

use printer::{Spinner, StreamPrinter};
use replies::Replies;

/// Time the CLI waits beyond the agent's LLM timeout, so the agent's own error reply for a
/// model that never answers arrives before the CLI gives up.
const BEYOND_LLM_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest pause between attempts to publish while the broker is away.
const MAX_PUBLISH_BACKOFF: Duration = Duration::from_secs(2);

/// What a turn shows before its final reply.
#[derive(Debug)]
pub enum ReplyEvent<'a> {
    /// Stream delta number `seq` of the turn.
    Delta {
        /// Sequence number within the turn (1, 2, …).
        seq: u32,
        /// The text.
        text: &'a str,
    },
    /// One streamed segment ended (tools may run next).
    SegmentEnd,
    /// A progress line or tool hint.
    Note(&'a OutboundMessage),
}

/// Returns how long the CLI waits for the next sign of its turn (a delta, a hint, the reply):
/// the API's wait, and always longer than the agent's LLM timeout (`runner.llmTimeoutSecs`).
pub fn reply_wait(cfg: &Config) -> Duration {
    let api = Duration::from_secs_f64(cfg.api.timeout.max(1.0) * 2.5);
    let llm = Duration::from_secs(cfg.runner.llm_timeout_secs) + BEYOND_LLM_TIMEOUT;
    api.max(llm)
}

/// Words that end the interactive chat (upstream).
pub const EXIT_WORDS: &[&str] = &["exit", "quit", "/exit", "/quit", ":q"];

/// A chat session with the fleet.
pub struct Chat {
    bus: Bus,
    bot: String,
    chat_id: String,
    session_key: String,
    timeout: Duration,
    replies: Replies,
}

impl Chat {
    /// Opens a chat for `session` (default `cli:direct`) of the first bot.
    pub async fn open(
        cfg: &Config,
        bus: Bus,
        session: Option<&str>,
        bot: Option<&str>,
    ) -> anyhow::Result<Self> {
        let bot = match bot {
            Some(b) => cfg.bot(b).with_context(|| format!("unknown bot {b:?}"))?.id,
            None => cfg.bots()[0].id.clone(),
        };
        let session_key = session.unwrap_or("cli:direct").to_string();
        let chat_id = session_key
            .strip_prefix("cli:")
            .unwrap_or(&session_key)
            .to_string();
        let subject = subjects::outbound(&bot, "cli", &chat_id);
        let replies = Replies::open(bus.client.clone(), bus.js.clone(), subject).await?;
        let timeout = reply_wait(cfg);
        Ok(Self {
            bus,
            bot,
            chat_id,
            session_key,
            timeout,
            replies,
        })
    }

    /// Sends `text` (asking for stream deltas) and returns the final reply; deltas, segment
    /// ends, progress and tool hints go to `on_event`. The wait restarts with every sign of
    /// the turn; a broker restart on the way is ridden out (publish retried with the same
    /// message id, reply consumer recreated).
    pub async fn ask(
        &mut self,
        text: &str,
        on_event: &mut dyn FnMut(ReplyEvent<'_>),
    ) -> anyhow::Result<String> {
        let id = uuid::Uuid::new_v4().to_string();
        let msg = InboundMessage {
            id: id.clone(),
            bot: self.bot.clone(),
            channel: "cli".into(),
            sender_id: "user".into(),
            chat_id: self.chat_id.clone(),
            content: text.to_string(),
            timestamp_ms: chrono::Utc::now().timestamp_millis(),
            session_key: self.session_key.clone(),
            metadata_json: "{}".into(),
            stream: true,
            ..Default::default()
        };
        self.publish(&msg).await?;
        let mut deadline = Instant::now() + self.timeout;
        loop {
            let Ok(out) = self.replies.next(deadline).await else {
                bail!(
                    "no reply within {}s (is an agent runner running? `nanobot status`)",
                    self.timeout.as_secs()
                )
            };
            // A follow-up injected into a running turn is answered by that turn's reply.
            if out.reply_to != id && !out.answers.contains(&id) {
                continue;
            }
            deadline = Instant::now() + self.timeout;
            match OutboundKind::try_from(out.kind).unwrap_or(OutboundKind::Final) {
                OutboundKind::Final => return Ok(out.content),
                OutboundKind::Error => bail!("{}", out.content),
                OutboundKind::StreamDelta => on_event(ReplyEvent::Delta {
                    seq: out.seq,
                    text: &out.content,
                }),
                OutboundKind::StreamEnd => on_event(ReplyEvent::SegmentEnd),
                OutboundKind::Progress | OutboundKind::ToolHint => on_event(ReplyEvent::Note(&out)),
            }
        }
    }

    /// Publishes `msg`, retrying while the broker is away (its id de-duplicates a retry whose
    /// first attempt did land).
    async fn publish(&self, msg: &InboundMessage) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Duration::from_millis(200);
        loop {
            let attempt = bus::publish(&self.bus.js, msg.subject(), Some(&msg.id), msg).await;
            let Err(e) = attempt else {
                return Ok(());
            };
            if Instant::now() + backoff >= deadline {
                return Err(e).context("publish the message");
            }
            tracing::info!(error = %e, retry_in = ?backoff, "publish failed, retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_PUBLISH_BACKOFF);
        }
    }

    /// Returns how many reply consumers this chat created (more than one after a broker
    /// restart).
    pub fn reply_consumers(&self) -> u32 {
        self.replies.consumers
    }
}

/// Returns the ready instances of `role`, asking every service over the status subject.
pub async fn live(bus: &Bus, role: &str) -> usize {
    crate::status::collect(&bus.client, Duration::from_millis(400))
        .await
        .iter()
        .filter(|s| s.role == role && s.ready)
        .count()
}

/// Asks `text` and prints the reply to stdout as it streams, after `prefix`.
async fn show(chat: &mut Chat, text: &str, prefix: &'static str) -> anyhow::Result<()> {
    let spinner = Spinner::new(std::io::stderr().is_terminal());
    let mut printer = StreamPrinter::new(std::io::stdout(), prefix, spinner);
    let result = chat
        .ask(text, &mut |event| match event {
            ReplyEvent::Delta { seq, text } => printer.delta(seq, text),
            ReplyEvent::SegmentEnd => printer.segment_end(),
            ReplyEvent::Note(out) => printer.note(&out.content),
        })
        .await;
    match result {
        Ok(reply) => {
            printer.finish(&reply);
            Ok(())
        }
        Err(e) => {
            printer.abandon();
            Err(e)
        }
    }
}

/// One-shot: prints the reply to stdout as it streams.
pub async fn one_shot(chat: &mut Chat, text: &str) -> anyhow::Result<()> {
    show(chat, text, "").await
}

/// Interactive chat on stdin/stdout until an exit word or end of input.
pub async fn interactive(chat: &mut Chat) -> anyhow::Result<()> {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    println!("🐈 nanobot — chat through the fleet (type exit or Ctrl+D to leave)");
    loop {
        stdout.write_all(b"You: ").await?;
        stdout.flush().await?;
        let Some(line) = lines.next_line().await? else {
            break;
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if EXIT_WORDS.contains(&text.to_lowercase().as_str()) {
            break;
        }
        match show(chat, text, "🐈 nanobot: ").await {
            Ok(()) => println!(),
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
    println!("Goodbye!");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> Config {
        nanobot_runtime::config::load_str(
            Some(json),
            std::path::Path::new("c.json"),
            &Default::default(),
        )
        .unwrap()
    }

    #[test]
    fn the_cli_waits_longer_than_the_agent_s_llm_timeout() {
        let defaults = cfg("{}");
        assert!(reply_wait(&defaults) > Duration::from_secs(defaults.runner.llm_timeout_secs));
        let slow = cfg(r#"{"runner": {"llmTimeoutSecs": 900}, "api": {"timeout": 10}}"#);
        assert_eq!(reply_wait(&slow), Duration::from_secs(960));
        let fast = cfg(r#"{"runner": {"llmTimeoutSecs": 5}, "api": {"timeout": 120}}"#);
        assert_eq!(reply_wait(&fast), Duration::from_secs(300));
    }
}
