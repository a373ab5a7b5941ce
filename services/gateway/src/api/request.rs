//! Parsing and validation of a `POST /v1/chat/completions` JSON body, with upstream's rules
//! and texts: exactly one `user` message, content as a string or as `text` / `image_url`
//! parts, and images only as `data:` URLs.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

use super::error::ApiError;

/// Largest decoded image accepted, as upstream (10 MB).
const MAX_IMAGE_BYTES: usize = 10 * 1024 * 1024;

const SINGLE_USER_MESSAGE: &str = "Only a single user message is supported";
const REMOTE_IMAGE: &str = "Remote image URLs are not supported. Use base64 data URLs.";

/// A validated chat request.
#[derive(Debug)]
pub(crate) struct ChatRequest {
    /// The user's text (text parts joined by a space).
    pub(crate) text: String,
    /// Decoded `data:` URL images, in order.
    pub(crate) images: Vec<Image>,
    /// The client's session id, when given.
    pub(crate) session_id: Option<String>,
    /// The model the client asked for, when given.
    pub(crate) model: Option<String>,
    /// Whether the client wants server-sent events.
    pub(crate) stream: bool,
    /// `stream_options.include_usage`: a streamed answer ends with a chunk carrying `usage`.
    pub(crate) include_usage: bool,
}

/// One decoded image attachment.
#[derive(Debug, PartialEq)]
pub(crate) struct Image {
    pub(crate) bytes: Vec<u8>,
    /// File extension with its dot, from the MIME type.
    pub(crate) ext: &'static str,
}

impl ChatRequest {
    /// Parses a JSON body.
    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let invalid_json = || ApiError::BadRequest("Invalid JSON body".into());
        let value: Value = serde_json::from_slice(body).map_err(|_| invalid_json())?;
        let Value::Object(body) = value else {
            return Err(invalid_json());
        };
        let message = match body.get("messages") {
            Some(Value::Array(messages)) if messages.len() == 1 => &messages[0],
            _ => return Err(ApiError::BadRequest(SINGLE_USER_MESSAGE.into())),
        };
        if message.get("role").and_then(Value::as_str) != Some("user") {
            return Err(ApiError::BadRequest(SINGLE_USER_MESSAGE.into()));
        }
        let (text, images) = match message.get("content") {
            None | Some(Value::Null) => (String::new(), Vec::new()),
            Some(Value::String(text)) => (text.clone(), Vec::new()),
            Some(Value::Array(parts)) => parse_parts(parts)?,
            Some(_) => return Err(ApiError::BadRequest("Invalid content format".into())),
        };
        Ok(Self {
            text,
            images,
            session_id: optional_text(body.get("session_id")),
            model: optional_text(body.get("model")),
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// Checks that the requested model, if any, is the configured one.
    pub(crate) fn check_model(&self, configured: &str) -> Result<(), ApiError> {
        match &self.model {
            Some(model) if model != configured => Err(ApiError::BadRequest(format!(
                "Only configured model '{configured}' is available"
            ))),
            _ => Ok(()),
        }
    }
}

/// Returns a string field as given, other scalars as their JSON text; empty and false-y values
/// count as absent (upstream tests truthiness).
fn optional_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn parse_parts(parts: &[Value]) -> Result<(String, Vec<Image>), ApiError> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(part.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("image_url") => {
                let url = part
                    .get("image_url")
                    .and_then(|u| u.get("url"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if url.starts_with("data:") {
                    images.push(decode_data_url(url)?);
                } else if !url.is_empty() {
                    return Err(ApiError::BadRequest(REMOTE_IMAGE.into()));
                }
            }
            _ => {}
        }
    }
    Ok((texts.join(" "), images))
}

/// Decodes `data:<mime>;base64,<payload>`.
fn decode_data_url(url: &str) -> Result<Image, ApiError> {
    let invalid = || ApiError::BadRequest("Invalid image data URL".into());
    let rest = url.strip_prefix("data:").ok_or_else(invalid)?;
    let (mime, payload) = rest.split_once(';').ok_or_else(invalid)?;
    let payload = payload.strip_prefix("base64,").ok_or_else(invalid)?;
    if mime.is_empty() || payload.is_empty() {
        return Err(invalid());
    }
    let compact: String = payload
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(compact.trim_end_matches('='))
        .map_err(|_| invalid())?;
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(ApiError::TooLarge(format!(
            "File exceeds {}MB limit",
            MAX_IMAGE_BYTES / (1024 * 1024)
        )));
    }
    Ok(Image {
        bytes,
        ext: extension(mime),
    })
}

fn extension(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().as_str() {
        "image/png" => ".png",
        "image/jpeg" | "image/jpg" => ".jpg",
        "image/gif" => ".gif",
        "image/webp" => ".webp",
        "image/bmp" => ".bmp",
        "image/svg+xml" => ".svg",
        "image/tiff" => ".tiff",
        _ => ".bin",
    }
}

/// Returns the directory API attachments of a bot go to: `<workspace>/.nanobot/media/api`, on
/// the workspace volume every role that reads media mounts.
pub(crate) fn media_dir(workspace: &Path) -> PathBuf {
    workspace
        .join(".nanobot")
        .join("media")
        .join(crate::API_CHANNEL)
}

/// Writes `images` into `dir` under fresh names and returns their absolute paths.
pub(crate) async fn save_images(images: Vec<Image>, dir: &Path) -> Result<Vec<String>, ApiError> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| ApiError::internal("create media dir", e))?;
    let mut paths = Vec::with_capacity(images.len());
    for image in images {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = dir.join(format!("{}{}", &id[..12], image.ext));
        tokio::fs::write(&path, &image.bytes)
            .await
            .map_err(|e| ApiError::internal("save an image", e))?;
        paths.push(path.to_string_lossy().into_owned());
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatRequest, String> {
        ChatRequest::parse(body.as_bytes()).map_err(|e| match e {
            ApiError::BadRequest(m) | ApiError::TooLarge(m) => m,
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn string_and_part_contents_become_text_and_images() {
        let r = parse(
            r#"{"messages":[{"role":"user","content":"hi"}],"session_id":"s1","stream":true}"#,
        )
        .unwrap();
        assert_eq!(
            (r.text.as_str(), r.session_id.as_deref(), r.stream),
            ("hi", Some("s1"), true)
        );
        let r = parse(
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"look"},
                {"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}},
                {"type":"text","text":"here"}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.text, "look here");
        assert_eq!(
            r.images,
            vec![Image {
                bytes: b"hello".to_vec(),
                ext: ".png"
            }]
        );
        assert_eq!((r.session_id, r.stream, r.model), (None, false, None));
    }

    #[test]
    fn malformed_requests_get_upstream_texts() {
        let single = "Only a single user message is supported";
        assert_eq!(parse("{").unwrap_err(), "Invalid JSON body");
        assert_eq!(parse("[]").unwrap_err(), "Invalid JSON body");
        assert_eq!(parse(r#"{}"#).unwrap_err(), single);
        assert_eq!(parse(r#"{"messages":[]}"#).unwrap_err(), single);
        assert_eq!(
            parse(r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}"#)
                .unwrap_err(),
            single
        );
        assert_eq!(
            parse(r#"{"messages":[{"role":"system","content":"a"}]}"#).unwrap_err(),
            single
        );
        assert_eq!(
            parse(r#"{"messages":[{"role":"user","content":5}]}"#).unwrap_err(),
            "Invalid content format"
        );
        let remote = r#"{"messages":[{"role":"user","content":[
            {"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#;
        assert_eq!(parse(remote).unwrap_err(), REMOTE_IMAGE);
        let broken = r#"{"messages":[{"role":"user","content":[
            {"type":"image_url","image_url":{"url":"data:image/png,xyz"}}]}]}"#;
        assert_eq!(parse(broken).unwrap_err(), "Invalid image data URL");
    }

    #[test]
    fn only_the_configured_model_is_accepted() {
        let r = parse(r#"{"messages":[{"role":"user","content":"x"}],"model":"other"}"#).unwrap();
        let err = r.check_model("mine").unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad request: Only configured model 'mine' is available"
        );
        let r = parse(r#"{"messages":[{"role":"user","content":"x"}],"model":"mine"}"#).unwrap();
        assert!(r.check_model("mine").is_ok());
        let r = parse(r#"{"messages":[{"role":"user","content":"x"}],"model":""}"#).unwrap();
        assert!(r.check_model("mine").is_ok());
    }

    #[test]
    fn oversized_images_are_refused() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_IMAGE_BYTES + 1]);
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"data:image/jpeg;base64,{big}"}}}}]}}]}}"#
        );
        assert_eq!(parse(&body).unwrap_err(), "File exceeds 10MB limit");
    }

    #[tokio::test]
    async fn images_are_saved_under_the_media_dir() {
        let dir = tempfile::tempdir().unwrap();
        let media = media_dir(dir.path());
        let paths = save_images(
            vec![Image {
                bytes: b"png".to_vec(),
                ext: ".png",
            }],
            &media,
        )
        .await
        .unwrap();
        assert_eq!(paths.len(), 1);
        assert!(paths[0].ends_with(".png") && paths[0].contains(".nanobot/media/api/"));
        assert_eq!(std::fs::read(&paths[0]).unwrap(), b"png");
    }
}
