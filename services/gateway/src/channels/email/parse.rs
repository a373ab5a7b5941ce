//! Pure translation of a raw mail into what the channel needs, as upstream: the sender, the
//! subject, the threading ids, the readable body (text/plain preferred, HTML converted to text),
//! the attachments, and whether the mail was sent by a machine (never answered: auto-replies,
//! bounces, lists; upstream's self-reply loop was issue #3215).

use mail_parser::{MessageParser, MimeHeaders as _, PartType};

/// What upstream puts in place of an empty body.
const EMPTY_BODY: &str = "(empty email body)";

/// A parsed mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// The `From` address, lower case (empty when there is none).
    pub sender: String,
    /// The decoded subject.
    pub subject: String,
    /// The `Date` header as written.
    pub date: String,
    /// `<Message-ID>` with its angle brackets (empty when there is none).
    pub message_id: String,
    /// The `References` ids, each with angle brackets.
    pub references: Vec<String>,
    /// The readable body, at most `max_body_chars` characters.
    pub body: String,
    /// Why the mail is machine-sent, when it is.
    pub automated: Option<&'static str>,
    /// The `Authentication-Results` values, topmost first (judged by [`super::authres`]).
    pub auth_results: Vec<String>,
    /// Attachments: (MIME type, file name, bytes).
    pub attachments: Vec<Attachment>,
}

/// One attachment of a mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// `type/subtype`, lower case.
    pub content_type: String,
    /// The file name given by the sender (unsanitised).
    pub name: String,
    /// The decoded content.
    pub data: Vec<u8>,
}

/// Parses `raw`; `None` when it is no mail at all.
pub fn parse(raw: &[u8], max_body_chars: usize) -> Option<Mail> {
    let msg = MessageParser::default().parse(raw)?;
    let sender = msg
        .from()
        .and_then(|f| f.first())
        .and_then(|a| a.address())
        .map(|a| a.trim().to_lowercase())
        .unwrap_or_default();
    let header = |name: &str| {
        raw_headers(&msg, name)
            .into_iter()
            .next()
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let automated = automated(&header, &sender);
    // Raw header text: `Authentication-Results` has no typed parser.
    let auth_results = raw_headers(&msg, "Authentication-Results");
    let mut body = body_text(&msg);
    if body.is_empty() {
        body = EMPTY_BODY.to_string();
    }
    let body: String = body.chars().take(max_body_chars).collect();
    let attachments = msg
        .attachments()
        .filter(|part| !matches!(part.body, PartType::Message(_)))
        .map(|part| Attachment {
            content_type: part
                .content_type()
                .map(|ct| match ct.subtype() {
                    Some(sub) => format!("{}/{sub}", ct.ctype()),
                    None => ct.ctype().to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".into())
                .to_lowercase(),
            name: part.attachment_name().unwrap_or("attachment").to_string(),
            data: part.contents().to_vec(),
        })
        .collect();
    Some(Mail {
        subject: msg.subject().unwrap_or_default().trim().to_string(),
        date: header("Date"),
        message_id: msg
            .message_id()
            .map(|id| format!("<{}>", id.trim()))
            .unwrap_or_default(),
        references: msg
            .references()
            .as_text_list()
            .map(|ids| ids.iter().map(|id| format!("<{id}>")).collect())
            .unwrap_or_else(|| {
                msg.references()
                    .as_text()
                    .map(|id| vec![format!("<{id}>")])
                    .unwrap_or_default()
            }),
        sender,
        body,
        automated,
        auth_results,
        attachments,
    })
}

/// Returns every raw value of `name` (case-insensitive), as written.
fn raw_headers(msg: &mail_parser::Message<'_>, name: &str) -> Vec<String> {
    let Some(root) = msg.parts.first() else {
        return Vec::new();
    };
    root.headers
        .iter()
        .filter(|h| h.name.as_str().eq_ignore_ascii_case(name))
        .filter_map(|h| {
            msg.raw_message
                .get(h.offset_start as usize..h.offset_end as usize)
        })
        .map(|raw| String::from_utf8_lossy(raw).into_owned())
        .collect()
}

/// Returns why a mail was sent by a machine (RFC 3834 `Auto-Submitted`, `Precedence`,
/// vacation-responder headers, a list, a bounce), or `None` for a person's mail.
fn automated(header: &impl Fn(&str) -> String, sender: &str) -> Option<&'static str> {
    let auto_submitted = header("Auto-Submitted").to_lowercase();
    let auto_submitted = auto_submitted.split(';').next().unwrap_or_default().trim();
    if !auto_submitted.is_empty() && auto_submitted != "no" {
        return Some("Auto-Submitted");
    }
    let precedence = header("Precedence").to_lowercase();
    if ["bulk", "junk", "list", "auto_reply"].contains(&precedence.as_str()) {
        return Some("Precedence");
    }
    for name in ["X-Autoreply", "X-Autorespond", "List-Id"] {
        if !header(name).is_empty() {
            return Some(name);
        }
    }
    let local = sender.split('@').next().unwrap_or_default();
    if local == "mailer-daemon" || local == "postmaster" {
        return Some("bounce sender");
    }
    if header("Return-Path").replace(' ', "") == "<>" {
        return Some("null Return-Path");
    }
    None
}

/// Returns the body as text: the text/plain parts, else the HTML parts converted to text.
fn body_text(msg: &mail_parser::Message<'_>) -> String {
    let mut plain = Vec::new();
    let mut html = Vec::new();
    for part in msg.text_bodies().chain(msg.html_bodies()) {
        match &part.body {
            PartType::Text(text) if !plain.contains(&text.as_ref()) => plain.push(text.as_ref()),
            PartType::Html(markup) if !html.contains(&markup.as_ref()) => {
                html.push(markup.as_ref())
            }
            _ => {}
        }
    }
    if !plain.is_empty() {
        return plain.join("\n\n").trim().to_string();
    }
    html.iter()
        .map(|markup| html_to_text(markup))
        .collect::<Vec<_>>()
        .join("\n\n")
        .trim()
        .to_string()
}

/// Converts HTML to readable text (block elements become line breaks).
pub fn html_to_text(html: &str) -> String {
    dom_query::Document::from(html).formatted_text().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mail(headers: &str, body: &str) -> Mail {
        let raw = format!("{headers}\r\n\r\n{body}")
            .replace('\n', "\r\n")
            .replace("\r\r", "\r");
        parse(raw.as_bytes(), 12000).expect("a mail")
    }

    #[test]
    fn senders_subjects_and_thread_ids_are_read_as_upstream() {
        let m = mail(
            "From: Alice <Alice@Example.COM>\nTo: bot@x\nSubject: =?utf-8?q?Caf=C3=A9?= plans\n\
             Date: Mon, 1 Jan 2026 10:00:00 +0000\nMessage-ID: <abc@example.com>\n\
             References: <r1@x> <r2@x>\nAuthentication-Results: mx.x; spf=pass smtp.mailfrom=x; dkim=pass header.d=x",
            "hello",
        );
        assert_eq!(m.sender, "alice@example.com");
        assert_eq!(m.subject, "Café plans");
        assert_eq!(m.date, "Mon, 1 Jan 2026 10:00:00 +0000");
        assert_eq!(m.message_id, "<abc@example.com>");
        assert_eq!(m.references, ["<r1@x>", "<r2@x>"]);
        assert_eq!(m.body, "hello");
        let passed = |m: &Mail, method| super::super::authres::passed(&m.auth_results, "", method);
        assert!(passed(&m, "spf") && passed(&m, "dkim"));
        assert_eq!(m.automated, None);
        let unsigned = mail(
            "From: a@x\nAuthentication-Results: mx; spf=fail; dkim=passive",
            "",
        );
        assert!(!passed(&unsigned, "spf") && !passed(&unsigned, "dkim"));
        assert_eq!(unsigned.body, EMPTY_BODY);
    }

    #[test]
    fn auto_replies_bounces_and_list_mail_are_machine_sent() {
        for (headers, why) in [
            (
                "From: a@x\nAuto-Submitted: auto-replied; owner=a",
                "Auto-Submitted",
            ),
            (
                "From: a@x\nAuto-Submitted: auto-generated",
                "Auto-Submitted",
            ),
            ("From: a@x\nPrecedence: bulk", "Precedence"),
            ("From: a@x\nPrecedence: auto_reply", "Precedence"),
            ("From: a@x\nPrecedence: junk", "Precedence"),
            ("From: a@x\nX-Autoreply: yes", "X-Autoreply"),
            ("From: a@x\nX-Autorespond: yes", "X-Autorespond"),
            ("From: a@x\nList-Id: <news.x>", "List-Id"),
            ("From: MAILER-DAEMON@x", "bounce sender"),
            ("From: postmaster@x", "bounce sender"),
            ("From: a@x\nReturn-Path: <>", "null Return-Path"),
        ] {
            assert_eq!(mail(headers, "x").automated, Some(why), "{headers}");
        }
        assert_eq!(mail("From: a@x\nAuto-Submitted: no", "x").automated, None);
        assert_eq!(
            mail("From: a@x\nPrecedence: first-class", "x").automated,
            None
        );
    }

    #[test]
    fn plain_text_is_preferred_html_is_converted_and_bodies_are_truncated() {
        let alt = "From: a@x\nMIME-Version: 1.0\nContent-Type: multipart/alternative; boundary=b\n\n\
             --b\nContent-Type: text/plain\n\nplain words\n--b\nContent-Type: text/html\n\n\
             <p>html words</p>\n--b--";
        assert_eq!(mail(alt, "").body, "plain words");
        let html = mail(
            "From: a@x\nContent-Type: text/html",
            "<html><body><p>Hello <b>there</b></p><p>second &amp; last</p></body></html>",
        );
        assert!(html.body.contains("Hello there"), "{:?}", html.body);
        assert!(html.body.contains("second & last"), "{:?}", html.body);
        assert!(!html.body.contains('<'), "{:?}", html.body);
        let long = parse(b"From: a@x\r\n\r\nabcdefghij", 4).unwrap();
        assert_eq!(long.body, "abcd");
    }

    #[test]
    fn attachments_are_read_with_their_type_and_name() {
        let m = mail(
            "From: a@x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n\
             --b\nContent-Type: text/plain\n\nsee attached\n--b\nContent-Type: application/pdf\n\
             Content-Disposition: attachment; filename=\"report.pdf\"\nContent-Transfer-Encoding: base64\n\n\
             JVBERi0xLjQ=\n--b--",
            "",
        );
        assert_eq!(m.body, "see attached");
        assert_eq!(m.attachments.len(), 1);
        assert_eq!(m.attachments[0].content_type, "application/pdf");
        assert_eq!(m.attachments[0].name, "report.pdf");
        assert_eq!(m.attachments[0].data, b"%PDF-1.4");
    }
}
