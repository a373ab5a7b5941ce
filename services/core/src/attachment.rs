//! Reading a message's attachments for the model, bounded: only regular files inside the bot's
//! workspace (its `.nanobot/media` folder, where channels save downloads, is inside it), at most
//! [`MAX_ATTACHMENT_BYTES`], and only images recognised by their magic bytes. Everything else
//! is refused with a reason the turn shows the model instead of the file, so a message naming
//! `/dev/zero`, a FIFO or a host file can neither exhaust memory, block the turn nor leak data.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Largest attachment read (upstream's Telegram download cap).
pub const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// An image ready to inline.
#[derive(Debug, PartialEq, Eq)]
pub struct Image {
    /// MIME type from the magic bytes.
    pub mime: &'static str,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// Why an attachment was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// The path resolves outside the workspace.
    #[error("outside the workspace")]
    OutsideWorkspace,
    /// Not a regular file (device, FIFO, socket, directory).
    #[error("not a regular file")]
    NotAFile,
    /// Larger than [`MAX_ATTACHMENT_BYTES`].
    #[error("larger than {} MB", MAX_ATTACHMENT_BYTES / (1024 * 1024))]
    TooLarge,
    /// Missing or unreadable.
    #[error("unreadable: {0}")]
    Unreadable(String),
}

/// Reads `path` if it is an image the model may see: `Ok(None)` for a regular file that is no
/// image (upstream passes those as `[file: …]` breadcrumbs only).
pub fn read_image(workspace: &Path, path: &str) -> Result<Option<Image>, Refused> {
    let resolved = confine(workspace, Path::new(path))?;
    let meta = std::fs::metadata(&resolved).map_err(|e| Refused::Unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(Refused::NotAFile);
    }
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err(Refused::TooLarge);
    }
    let file = std::fs::File::open(&resolved).map_err(|e| Refused::Unreadable(e.to_string()))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The cap holds even for a file that grows after the size check.
    file.take(MAX_ATTACHMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(Refused::TooLarge);
    }
    Ok(mime_of(&bytes).map(|mime| Image { mime, bytes }))
}

/// Resolves `path` (relative ones against the workspace), following symlinks, and returns it
/// when it lies inside the workspace.
pub fn confine(workspace: &Path, path: &Path) -> Result<PathBuf, Refused> {
    let root = workspace
        .canonicalize()
        .map_err(|e| Refused::Unreadable(format!("workspace: {e}")))?;
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    };
    let resolved = joined
        .canonicalize()
        .map_err(|e| Refused::Unreadable(e.to_string()))?;
    if !resolved.starts_with(&root) {
        return Err(Refused::OutsideWorkspace);
    }
    Ok(resolved)
}

/// Returns the image MIME type of `bytes` by magic number.
pub fn mime_of(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some("image/webp"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 1, 2, 3];

    #[test]
    fn an_image_in_the_workspace_is_read_with_its_mime_type() {
        let ws = tempfile::tempdir().unwrap();
        let img = ws.path().join(".nanobot/media/api/a.png");
        std::fs::create_dir_all(img.parent().unwrap()).unwrap();
        std::fs::write(&img, PNG).unwrap();
        let read = read_image(ws.path(), &img.display().to_string()).unwrap();
        assert_eq!(
            read,
            Some(Image {
                mime: "image/png",
                bytes: PNG.to_vec()
            })
        );
        let relative = read_image(ws.path(), ".nanobot/media/api/a.png").unwrap();
        assert!(relative.is_some());
    }

    #[test]
    fn a_text_file_is_no_image() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "hello").unwrap();
        assert_eq!(read_image(ws.path(), "notes.txt"), Ok(None));
    }

    #[test]
    fn devices_and_host_files_are_refused_without_reading_them() {
        let ws = tempfile::tempdir().unwrap();
        assert_eq!(
            read_image(ws.path(), "/dev/zero"),
            Err(Refused::OutsideWorkspace)
        );
        assert_eq!(
            read_image(ws.path(), "/etc/passwd"),
            Err(Refused::OutsideWorkspace)
        );
        assert_eq!(
            read_image(ws.path(), "../../etc/passwd"),
            Err(Refused::OutsideWorkspace)
        );
        // A symlink inside the workspace pointing at a device is judged by its target.
        std::os::unix::fs::symlink("/dev/zero", ws.path().join("zero.png")).unwrap();
        assert_eq!(
            read_image(ws.path(), "zero.png"),
            Err(Refused::OutsideWorkspace)
        );
    }

    #[test]
    fn a_fifo_or_directory_inside_the_workspace_is_not_a_file() {
        let ws = tempfile::tempdir().unwrap();
        let fifo = ws.path().join("pipe.png");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(read_image(ws.path(), "pipe.png"), Err(Refused::NotAFile));
        std::fs::create_dir(ws.path().join("dir")).unwrap();
        assert_eq!(read_image(ws.path(), "dir"), Err(Refused::NotAFile));
    }

    #[test]
    fn a_file_over_the_cap_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let big = std::fs::File::create(ws.path().join("big.png")).unwrap();
        big.set_len(MAX_ATTACHMENT_BYTES + 1).unwrap();
        assert_eq!(read_image(ws.path(), "big.png"), Err(Refused::TooLarge));
        assert!(matches!(
            read_image(ws.path(), "missing.png"),
            Err(Refused::Unreadable(_))
        ));
    }
}
