//! `nanobot agent`: send a message through the fleet (inbound JetStream) and print the reply
//! (outbound JetStream), one-shot with `-m` or as an interactive chat.

use std::time::Duration;

use anyhow::{Context as _, bail};
use async_nats::jetstream::{self, consumer::DeliverPolicy};
use futures::StreamExt as _;
use prost::Message as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

use nanobot_proto::{InboundMessage, OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::bus::{self, Bus};
use nanobot_runtime::config::Config;

/// Words that end the interactive chat (upstream).
pub const EXIT_WORDS: &[&str] = &["exit", "quit", "/exit", "/quit", ":q"];

/// A chat session with the fleet.
pub struct Chat {
    bus: Bus,
    bot: String,
    chat_id: String,
    session_key: String,
    timeout: Duration,
    replies: jetstream::consumer::pull::Ordered,
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
        let stream = bus
            .js
            .get_stream(subjects::OUTBOUND_STREAM)
            .await
            .context("open outbound stream")?;
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subjects::outbound(&bot, "cli", &chat_id),
                deliver_policy: DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .context("create reply consumer")?;
        let replies = consumer.messages().await.context("subscribe to replies")?;
        let timeout = Duration::from_secs_f64(cfg.api.timeout.max(1.0) * 2.5);
        Ok(Self {
            bus,
            bot,
            chat_id,
            session_key,
            timeout,
            replies,
        })
    }

    /// Sends `text` and returns the final reply; tool hints go to `on_event`.
    pub async fn ask(
        &mut self,
        text: &str,
        on_event: &mut dyn FnMut(&OutboundMessage),
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
            ..Default::default()
        };
        bus::publish(&self.bus.js, msg.subject(), Some(&id), &msg).await?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let next = tokio::time::timeout_at(deadline, self.replies.next()).await;
            let Ok(next) = next else {
                bail!(
                    "no reply within {}s (is an agent runner running? `nanobot status`)",
                    self.timeout.as_secs()
                )
            };
            let Some(next) = next else {
                bail!("reply stream closed")
            };
            let raw = next.context("receive reply")?;
            let Ok(out) = OutboundMessage::decode(raw.payload.clone()) else {
                continue;
            };
            // A follow-up injected into a running turn is answered by that turn's reply.
            if out.reply_to != id && !out.answers.contains(&id) {
                continue;
            }
            match OutboundKind::try_from(out.kind).unwrap_or(OutboundKind::Final) {
                OutboundKind::Final => return Ok(out.content),
                OutboundKind::Error => bail!("{}", out.content),
                _ => on_event(&out),
            }
        }
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

/// One-shot: prints the reply to stdout.
pub async fn one_shot(chat: &mut Chat, text: &str) -> anyhow::Result<()> {
    let reply = chat.ask(text, &mut print_event).await?;
    println!("{reply}");
    Ok(())
}

fn print_event(out: &OutboundMessage) {
    if out.kind == OutboundKind::ToolHint as i32 || out.kind == OutboundKind::Progress as i32 {
        eprintln!("  ↳ {}", out.content);
    }
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
        match chat.ask(text, &mut print_event).await {
            Ok(reply) => println!("🐈 nanobot: {reply}\n"),
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
    println!("Goodbye!");
    Ok(())
}
