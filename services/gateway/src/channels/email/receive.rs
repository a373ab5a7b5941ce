//! One mail → at most one inbound message, as upstream's `_fetch_messages_once`: the bot's own
//! mail, machine-sent mail, SPF/DKIM failures and senders outside `allowFrom` are skipped; an
//! allowed mail becomes upstream's `[EMAIL-CONTEXT]` text with its attachments saved.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::json;
use tracing::Instrument as _;

use nanobot_proto::InboundMessage;

use super::imap::Fetched;
use super::parse::{self, Attachment, Mail};
use super::{CHANNEL, EmailChannel, Thread, authres};
use crate::channels::media::{self, Budget, Caps};
use crate::channels::{Inbound, acl};

/// What became of a mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Handled {
    /// Published as an inbound message.
    Published,
    /// Skipped, and marked seen as upstream does (own address, machine-sent, not allowed).
    SkippedSeen,
    /// Skipped and left unseen (unparsable, no sender, SPF/DKIM failed), as upstream.
    SkippedUnseen,
}

/// Returns the inbound id of a mail: from its Message-ID (stable across mailboxes and
/// re-reads), else from its place in the mailbox.
pub(super) fn inbound_id(mailbox_id: &str, validity: u32, uid: u32, message_id: &str) -> String {
    if message_id.is_empty() {
        return format!("email:{mailbox_id}:{validity}:{uid}");
    }
    let digest = sha1_smol::Sha1::from(message_id.as_bytes())
        .digest()
        .to_string();
    format!("email:{}", &digest[..24])
}

/// Handles the mail `uid` of the mailbox (`fetched`: its bytes, or only its beginning when it
/// was over [`EmailChannel::max_mail_bytes`]); an error means nothing was published and the
/// mail must be handled again.
pub(super) async fn handle(
    ch: &EmailChannel,
    inbound: &Inbound,
    validity: u32,
    uid: u32,
    fetched: &Fetched,
) -> anyhow::Result<Handled> {
    // The turn's trace starts here: parsing, the sender checks, the ACL and the attachments
    // saved are in the gateway's receive span.
    let span = crate::channels::receive_span(&ch.bot_id, CHANNEL);
    handle_mail(ch, inbound, validity, uid, fetched)
        .instrument(span)
        .await
}

async fn handle_mail(
    ch: &EmailChannel,
    inbound: &Inbound,
    validity: u32,
    uid: u32,
    fetched: &Fetched,
) -> anyhow::Result<Handled> {
    let Some(mail) = parse::parse(&fetched.raw, ch.cfg.max_body_chars) else {
        tracing::warn!(bot = %ch.bot_id, uid, "unparsable mail skipped");
        return Ok(Handled::SkippedUnseen);
    };
    if mail.sender.is_empty() {
        tracing::warn!(bot = %ch.bot_id, uid, "mail without a sender skipped");
        return Ok(Handled::SkippedUnseen);
    }
    if ch.is_own(&mail.sender) {
        tracing::info!(bot = %ch.bot_id, uid, sender = %mail.sender, "mail from the bot's own address ignored");
        return Ok(Handled::SkippedSeen);
    }
    if let Some(why) = mail.automated {
        tracing::info!(bot = %ch.bot_id, uid, sender = %mail.sender, why, "machine-sent mail ignored");
        return Ok(Handled::SkippedSeen);
    }
    let passed = |method| authres::passed(&mail.auth_results, &ch.cfg.authserv_id, method);
    if ch.cfg.verify_spf && !passed("spf") {
        tracing::warn!(bot = %ch.bot_id, uid, sender = %mail.sender, authserv_id = %ch.cfg.authserv_id, "mail rejected: SPF verification failed (no spf=pass in the receiving server's Authentication-Results)");
        return Ok(Handled::SkippedUnseen);
    }
    if ch.cfg.verify_dkim && !passed("dkim") {
        tracing::warn!(bot = %ch.bot_id, uid, sender = %mail.sender, authserv_id = %ch.cfg.authserv_id, "mail rejected: DKIM verification failed (no dkim=pass in the receiving server's Authentication-Results)");
        return Ok(Handled::SkippedUnseen);
    }
    let allowed = acl::allowed_by_list(&ch.allow_from, &mail.sender)
        || ch
            .pairing
            .is_approved(CHANNEL, &mail.sender)
            .await
            .context("read pairing approvals")?;
    if !allowed {
        tracing::info!(bot = %ch.bot_id, uid, sender = %mail.sender, "mail from a sender not in allowFrom ignored");
        return Ok(Handled::SkippedSeen);
    }
    let id = inbound_id(&ch.mailbox_id, validity, uid, &mail.message_id);
    let (saved, skipped) = match fetched.cut {
        // Only the mail's beginning was read: its attachments were never loaded.
        Some(size) => (
            Vec::new(),
            vec![format!(
                "[attachments not saved: the mail is {size} bytes, over the {} allowed]",
                ch.max_mail_bytes()
            )],
        ),
        None => save_attachments(ch, &mail.attachments, uid).await,
    };
    let mut content = format!(
        "[EMAIL-CONTEXT] Email received.\nFrom: {}\nSubject: {}\nDate: {}\n\n{}",
        mail.sender, mail.subject, mail.date, mail.body
    );
    for path in &saved {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        content.push_str(&format!(
            "\n[attachment: {name} — saved to {}]",
            path.display()
        ));
    }
    for note in &skipped {
        content.push('\n');
        content.push_str(note);
    }
    let thread = Thread {
        subject: mail.subject.clone(),
        message_id: mail.message_id.clone(),
        references: mail.references.clone(),
    };
    ch.remember_thread(&id, &mail.sender, &thread)
        .await
        .context("store the mail's thread")?;
    let msg = InboundMessage {
        id,
        bot: ch.bot_id.clone(),
        channel: CHANNEL.into(),
        sender_id: mail.sender.clone(),
        chat_id: mail.sender.clone(),
        content,
        timestamp_ms: now_ms(),
        media: saved.iter().map(|p| p.display().to_string()).collect(),
        metadata_json: metadata(&mail, uid).to_string(),
        session_key: String::new(),
        stream: false,
        reply_channel: String::new(),
        reply_chat_id: String::new(),
    };
    inbound.publish(&msg).await.context("publish inbound")?;
    tracing::debug!(bot = %ch.bot_id, uid, inbound_id = %msg.id, "mail published");
    Ok(Handled::Published)
}

/// Upstream's metadata of an inbound mail.
fn metadata(mail: &Mail, uid: u32) -> serde_json::Value {
    json!({
        "message_id": mail.message_id,
        "subject": mail.subject,
        "date": mail.date,
        "sender_email": mail.sender,
        "uid": uid.to_string(),
    })
}

/// Saves the attachments `allowedAttachmentTypes` lets in, within `maxAttachmentSize`,
/// `maxAttachmentsPerEmail` and the per-message caps ([`Budget`]), as
/// `<media dir>/<uid>_<safe name>` ([`media::stored_name`]). Returns the saved paths and a
/// note for each one skipped by a limit; a write failure is logged and the mail goes on
/// without that file.
async fn save_attachments(
    ch: &EmailChannel,
    attachments: &[Attachment],
    uid: u32,
) -> (Vec<PathBuf>, Vec<String>) {
    let (mut saved, mut notes) = (Vec::new(), Vec::new());
    if ch.cfg.allowed_attachment_types.is_empty() {
        return (saved, notes);
    }
    let mut budget = Budget::new(Caps {
        max_count: ch.caps.max_count.min(ch.cfg.max_attachments_per_email),
        max_bytes: ch.caps.max_bytes,
    });
    for attachment in attachments {
        let wanted = ch
            .cfg
            .allowed_attachment_types
            .iter()
            .any(|pattern| type_matches(pattern, &attachment.content_type));
        if !wanted {
            tracing::debug!(bot = %ch.bot_id, content_type = %attachment.content_type, "attachment skipped: type not allowed");
            continue;
        }
        let size = attachment.data.len() as u64;
        let fits = match size > ch.cfg.max_attachment_size {
            true => Err(format!(
                "skipped: larger than {} bytes",
                ch.cfg.max_attachment_size
            )),
            false => budget.take(size),
        };
        if let Err(why) = fits {
            tracing::warn!(bot = %ch.bot_id, uid, size, why = %why, "attachment skipped");
            notes.push(format!("[attachment: {} - {why}]", attachment.name));
            continue;
        }
        let name = media::stored_name(&uid.to_string(), &attachment.name);
        let written = async {
            let path = media::path_in(&ch.media_dir, &name)?;
            tokio::fs::create_dir_all(&ch.media_dir).await?;
            tokio::fs::write(&path, &attachment.data).await?;
            anyhow::Ok(path)
        };
        match written.await {
            Ok(path) => saved.push(path),
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, name = %name, error = format!("{e:#}"), "attachment not saved")
            }
        }
    }
    (saved, notes)
}

/// Returns whether a MIME type matches an `allowedAttachmentTypes` pattern (`*`, `image/*`,
/// `application/pdf`), case-insensitive.
fn type_matches(pattern: &str, content_type: &str) -> bool {
    let pattern = pattern.trim().to_lowercase();
    if pattern == "*" || pattern == content_type {
        return true;
    }
    pattern
        .strip_suffix("/*")
        .is_some_and(|major| content_type.split('/').next() == Some(major))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_ids_follow_the_message_id_else_the_mailbox_position() {
        let a = inbound_id("m", 7, 1, "<x@y>");
        assert_eq!(
            a,
            inbound_id("other", 9, 5, "<x@y>"),
            "a re-read is the same id"
        );
        assert_ne!(a, inbound_id("m", 7, 1, "<z@y>"));
        assert!(a.starts_with("email:") && !a.contains('<'));
        assert_eq!(inbound_id("m", 7, 1, ""), "email:m:7:1");
    }

    #[test]
    fn attachment_types_and_names_are_checked() {
        assert!(type_matches("*", "application/pdf"));
        assert!(type_matches("image/*", "image/png"));
        assert!(type_matches("Application/PDF", "application/pdf"));
        assert!(!type_matches("image/*", "application/pdf"));
        assert!(!type_matches("image/*", "imagex/png"));
    }
}
