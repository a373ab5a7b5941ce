//! Replies by SMTP (lettre, tokio + rustls), as upstream's `EmailChannel.send`: to the chat's
//! address, from `fromAddress` (else `smtpUsername`, else `imapUsername`), subject `Re: ` + the
//! mail's subject (or upstream's `nanobot reply`), In-Reply-To and References continuing the
//! mail's thread, the reply's media attached within `maxAttachmentSize` and
//! `maxAttachmentsPerEmail` (a file left out is named in the text, as upstream).
//!
//! One SMTP submission per reply: the delivery layer hands a reply to one replica at a time and
//! records it once the server accepted it. A SIGKILL mid-send leaves the reply unacked; another
//! replica sends it after the ack wait. If the server had already accepted it (the kill fell
//! between the server's 250 and the record), the resend is a second copy with the same
//! Message-ID (derived from the delivery id), which mail clients show as one message.

use std::path::Path;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MessageBuilder, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};

use nanobot_proto::OutboundMessage;
use nanobot_runtime::config::EmailConfig;

use super::{EmailChannel, Thread};
use crate::channels::{Progress, SendError};

/// Upstream's subject when there is no mail to answer.
const DEFAULT_SUBJECT: &str = "nanobot reply";
/// Longest one SMTP conversation may take.
const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The SMTP transport of one channel.
pub(super) struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl Smtp {
    /// Builds the transport (no connection yet): implicit TLS with `smtpUseSsl`, STARTTLS with
    /// `smtpUseTls`, else plain; logs in when `smtpUsername` is set.
    pub(super) fn new(cfg: &EmailConfig) -> anyhow::Result<Self> {
        let host = cfg.smtp_host.trim();
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(cfg.smtp_port)
            .timeout(Some(SMTP_TIMEOUT));
        if cfg.smtp_use_ssl || cfg.smtp_use_tls {
            let params = TlsParameters::new(host.to_string())
                .map_err(|e| anyhow::anyhow!("channels.email.smtpHost: {e}"))?;
            builder = builder.tls(match cfg.smtp_use_ssl {
                true => Tls::Wrapper(params),
                false => Tls::Required(params),
            });
        }
        if !cfg.smtp_username.is_empty() {
            builder = builder.credentials(Credentials::new(
                cfg.smtp_username.clone(),
                cfg.smtp_password.clone(),
            ));
        }
        Ok(Self {
            transport: builder.build(),
        })
    }
}

/// Sends one reply (one SMTP submission).
pub(super) async fn send(
    ch: &EmailChannel,
    msg: &OutboundMessage,
    progress: &mut Progress,
) -> Result<(), SendError> {
    if !ch.cfg.consent_granted {
        tracing::warn!(bot = %ch.bot_id, delivery_id = %msg.id, "email reply not sent: consentGranted is false");
        return Ok(());
    }
    if progress.done() > 0 {
        return Ok(());
    }
    let to_address = msg.chat_id.trim().to_lowercase();
    let to: Mailbox = to_address
        .parse()
        .map_err(|_| SendError::Permanent(format!("{to_address:?} is not an email address")))?;
    let thread = ch
        .thread(&msg.reply_to, &to_address)
        .await
        .map_err(|e| SendError::Transient(format!("read the mail's thread: {e}")))?;
    let metadata: serde_json::Value = serde_json::from_str(&msg.metadata_json).unwrap_or_default();
    let force_send = metadata["force_send"].as_bool().unwrap_or(false);
    if thread.is_some() && !ch.cfg.auto_reply_enabled && !force_send {
        tracing::info!(bot = %ch.bot_id, delivery_id = %msg.id, "automatic email reply skipped: autoReplyEnabled is false");
        return Ok(());
    }
    let thread = thread.unwrap_or_default();
    let subject = match metadata["subject"].as_str().map(str::trim) {
        Some(subject) if !subject.is_empty() => subject.to_string(),
        _ => reply_subject(&thread.subject, &ch.cfg.subject_prefix),
    };
    let email = build(ch, msg, to, &subject, &thread).await?;
    match ch.smtp.transport.send(email).await {
        Ok(_) => {
            progress.part_done().await;
            tracing::debug!(bot = %ch.bot_id, delivery_id = %msg.id, "email reply sent");
            Ok(())
        }
        Err(e) if e.is_permanent() => Err(SendError::Permanent(e.to_string())),
        Err(e) => Err(SendError::Transient(e.to_string())),
    }
}

/// Returns upstream's reply subject: the subject as is when it starts with `Re:`, else the
/// prefix before it (`nanobot reply` when there is none).
pub fn reply_subject(subject: &str, prefix: &str) -> String {
    let subject = match subject.trim() {
        "" => DEFAULT_SUBJECT,
        s => s,
    };
    if subject.to_lowercase().starts_with("re:") {
        return subject.to_string();
    }
    let prefix = if prefix.is_empty() { "Re: " } else { prefix };
    format!("{prefix}{subject}")
}

/// Returns the reply's From: `fromAddress`, else `smtpUsername`, else `imapUsername`.
fn from_address(cfg: &EmailConfig) -> &str {
    [&cfg.from_address, &cfg.smtp_username, &cfg.imap_username]
        .into_iter()
        .map(|a| a.trim())
        .find(|a| !a.is_empty())
        .unwrap_or_default()
}

/// Returns the reply's Message-ID: the same for every attempt of one delivery, made of the
/// characters a Message-ID allows whatever the delivery id holds (`:`, `@`).
fn message_id(delivery_id: &str, domain: &str) -> String {
    let digest = sha1_smol::Sha1::from(delivery_id.as_bytes())
        .digest()
        .to_string();
    format!("<{}.nanobot@{domain}>", &digest[..32])
}

async fn build(
    ch: &EmailChannel,
    msg: &OutboundMessage,
    to: Mailbox,
    subject: &str,
    thread: &Thread,
) -> Result<Message, SendError> {
    let from: Mailbox = from_address(&ch.cfg)
        .parse()
        .map_err(|e| SendError::Permanent(format!("channels.email.fromAddress: {e}")))?;
    let message_id = message_id(&msg.id, from.email.domain());
    let mut builder = Message::builder()
        .from(from)
        .to(to)
        .subject(subject)
        .message_id(Some(message_id));
    if !thread.message_id.is_empty() {
        let mut references = thread.references.clone();
        references.push(thread.message_id.clone());
        builder = builder
            .in_reply_to(thread.message_id.clone())
            .references(references.join(" "));
    }
    let (files, notes) = attachments(ch, &msg.media).await;
    assemble(builder, body_of(&msg.content, &notes), files)
        .map_err(|e| SendError::Permanent(format!("build the mail: {e}")))
}

/// Returns the plain body of a reply as 0.3.5 writes it: the reply, then the notes of the
/// files left out after a blank line (the notes alone when the reply is blank), as
/// `EmailMessage.set_content` stores it ([`body_text`]).
pub fn body_of(content: &str, notes: &[String]) -> String {
    let is_space = crate::render::message::is_py_space;
    let text = match (notes.is_empty(), content.trim_matches(is_space).is_empty()) {
        (true, _) => content.to_string(),
        (false, true) => notes.join("\n"),
        (false, false) => format!(
            "{}\n\n{}",
            content.trim_end_matches(is_space),
            notes.join("\n")
        ),
    };
    body_text(text)
}

/// Returns the plain body as 0.3.5's `EmailMessage.set_content` writes it: `\r\n` and a lone
/// `\r` read as line ends and the body ending with one (an empty reply is a lone line end).
fn body_text(text: String) -> String {
    let mut body = text.replace("\r\n", "\n").replace('\r', "\n");
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body
}

/// Returns the mail: `text` as its plain body, then `files` attached. The body is never cut:
/// lettre picks its transfer encoding (7bit, quoted-printable or base64) so that every line
/// keeps within RFC 5322's 78 octets however long the reply's lines or however many bytes its
/// characters take, and encodes a non-ASCII subject (RFC 2047).
fn assemble(
    builder: MessageBuilder,
    text: String,
    files: Vec<SinglePart>,
) -> Result<Message, lettre::error::Error> {
    if files.is_empty() {
        return builder.singlepart(SinglePart::plain(text));
    }
    let mut parts = MultiPart::mixed().singlepart(SinglePart::plain(text));
    for part in files {
        parts = parts.singlepart(part);
    }
    builder.multipart(parts)
}

/// Reads the reply's media as attachments; returns them and upstream's notes for those left
/// out (`[attachment: name - too large]`, `- too many attachments`, `- send failed`).
async fn attachments(ch: &EmailChannel, media: &[String]) -> (Vec<SinglePart>, Vec<String>) {
    let mut parts = Vec::new();
    let mut notes = Vec::new();
    for item in media {
        let path = Path::new(item);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "attachment".into());
        if parts.len() >= ch.cfg.max_attachments_per_email {
            notes.push(format!("[attachment: {name} - too many attachments]"));
            continue;
        }
        let size = match tokio::fs::metadata(path).await {
            Ok(meta) if meta.is_file() => meta.len(),
            _ => {
                notes.push(format!("[attachment: {name} - send failed]"));
                continue;
            }
        };
        if ch.cfg.max_attachment_size == 0 || size > ch.cfg.max_attachment_size {
            notes.push(format!("[attachment: {name} - too large]"));
            continue;
        }
        let Ok(data) = tokio::fs::read(path).await else {
            notes.push(format!("[attachment: {name} - send failed]"));
            continue;
        };
        let mime = mime_guess::from_path(path).first_or_octet_stream();
        let content_type = ContentType::parse(mime.essence_str())
            .unwrap_or_else(|_| ContentType::parse("application/octet-stream").expect("valid"));
        parts.push(Attachment::new(name).body(data, content_type));
    }
    (parts, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_subjects_follow_upstream() {
        assert_eq!(reply_subject("Plans", "Re: "), "Re: Plans");
        assert_eq!(reply_subject("RE: Plans", "Re: "), "RE: Plans");
        assert_eq!(reply_subject("  ", "Re: "), "Re: nanobot reply");
        assert_eq!(reply_subject("Plans", "AW: "), "AW: Plans");
        assert_eq!(reply_subject("Plans", ""), "Re: Plans");
        let cfg = EmailConfig {
            smtp_username: "smtp@x".into(),
            imap_username: "imap@x".into(),
            ..EmailConfig::default()
        };
        assert_eq!(from_address(&cfg), "smtp@x");
        let own = EmailConfig {
            from_address: "Bot <bot@x>".into(),
            ..cfg
        };
        assert_eq!(from_address(&own), "Bot <bot@x>");
        let id = message_id("email:a@b.c:3", "x.org");
        assert_eq!(id, message_id("email:a@b.c:3", "x.org"));
        assert_ne!(id, message_id("email:a@b.c:4", "x.org"));
        assert_eq!(id.matches('@').count(), 1, "{id}");
        assert!(id.starts_with('<') && id.ends_with(".nanobot@x.org>") && !id.contains(':'));
    }

    #[test]
    fn the_body_ends_with_a_line_end_as_0_3_5_set_content_writes_it() {
        // Expected values are what 0.3.5's `EmailMessage.set_content(c).get_content()` gives.
        let cases = [
            ("你好 🐈", "你好 🐈\n"),
            ("a\r\nb", "a\nb\n"),
            ("", "\n"),
            ("x\n\n", "x\n\n"),
            (
                "مرحبا e\u{301}\u{2028}👩\u{200d}👩\u{200d}👧",
                "مرحبا e\u{301}\u{2028}👩\u{200d}👩\u{200d}👧\n",
            ),
        ];
        for (reply, body) in cases {
            assert_eq!(body_text(reply.to_string()), body, "{reply:?}");
        }
    }

    #[test]
    fn long_lines_of_any_script_are_sent_whole_in_lines_of_at_most_78_octets() {
        let family = "👩\u{200d}👩\u{200d}👧\u{200d}👦";
        let subject = format!("Re:{}", " 中文主题🇨🇳 שלום e\u{301}".repeat(12));
        let body = format!(
            "{}\n{}\n{}",
            format!("中文{family}🇨🇳👍🏽e\u{301}مرحبا ").repeat(400),
            "x".repeat(2000),
            "plain ascii line"
        );
        let builder = Message::builder()
            .from("Bot <bot@x.org>".parse().unwrap())
            .to("ann@y.org".parse().unwrap())
            .subject(subject.clone());
        let attachment = Attachment::new("a.txt".into())
            .body(body.clone().into_bytes(), ContentType::TEXT_PLAIN);
        for files in [vec![], vec![attachment]] {
            let raw = assemble(builder.clone(), body.clone(), files)
                .unwrap()
                .formatted();
            for line in raw.split(|b| *b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                assert!(line.len() <= 78, "{}", String::from_utf8_lossy(line));
            }
            let parsed = mail_parser::MessageParser::default().parse(&raw).unwrap();
            assert_eq!(parsed.subject(), Some(subject.as_str()));
            // Line breaks travel as CRLF (RFC 5322); nothing else changes.
            let received = parsed
                .body_text(0)
                .unwrap_or_default()
                .replace("\r\n", "\n");
            assert!(received == body, "the body came back changed");
        }
    }
}
