//! Text of PDF, DOCX, XLSX and PPTX documents, as upstream's `nanobot.utils.document`
//! extracts it: PDF pages with `--- Page N ---` headers (through `pdf-extract`), and Office
//! documents as a list of lines (sheet and slide headers, blank separators) that
//! `read_file` pages through like text.
//!
//! # Layout
//! - [`archive`]: the OOXML container's safety checks and part lookup.
//! - [`docx`], [`xlsx`], [`pptx`]: one line list per format.
//! - [`pdf`]: page text and page ranges.
//! - [`page`]: what `read_file` shows of them (numbering, footers, errors).

use std::path::Path;

mod archive;
mod docx;
pub mod page;
pub mod pdf;
mod pptx;
mod xlsx;

/// Largest Office document extracted at all (upstream's 50 MB).
const MAX_EXTRACT_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// A document format read by extraction rather than as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Portable Document Format.
    Pdf,
    /// Word (OOXML).
    Docx,
    /// Excel (OOXML).
    Xlsx,
    /// PowerPoint (OOXML).
    Pptx,
}

impl Kind {
    /// Returns the kind named by `path`'s extension (any case), if it is a document.
    pub fn of(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            "xlsx" => Some(Self::Xlsx),
            "pptx" => Some(Self::Pptx),
            _ => None,
        }
    }

    /// Returns the upper-case name (`DOCX`), as upstream's messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pdf => "PDF",
            Self::Docx => "DOCX",
            Self::Xlsx => "XLSX",
            Self::Pptx => "PPTX",
        }
    }
}

/// Why a document's text could not be extracted; `Display` is upstream's wording.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("failed to inspect file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is over [`MAX_EXTRACT_FILE_BYTES`].
    #[error("file exceeds 50 MB limit")]
    TooLarge,
    /// The container is not a ZIP archive.
    #[error("invalid Office document: {0}")]
    InvalidArchive(String),
    /// The container has more members than upstream allows.
    #[error("Office document contains too many files ({0})")]
    TooManyMembers(usize),
    /// A member is encrypted.
    #[error("encrypted Office documents are not supported")]
    Encrypted,
    /// A member expands beyond the per-member limit.
    #[error("Office document contains an oversized internal file")]
    OversizedMember,
    /// All members together expand beyond the archive limit.
    #[error("Office document expands beyond the 256 MB safety limit")]
    ExpandsTooMuch,
    /// The container is a ZIP archive but not a readable document of its kind.
    #[error("failed to open {}: {reason}", kind.name())]
    Open {
        /// The format being opened.
        kind: Kind,
        /// What was wrong.
        reason: String,
    },
    /// DOCX tables nest deeper than upstream's limit.
    #[error("table nesting exceeds {} levels", docx::MAX_TABLE_DEPTH)]
    TableTooDeep,
    /// DOCX tables hold more cells than upstream's limit.
    #[error("document contains more than {} table cells", docx::MAX_TABLE_CELLS)]
    TooManyCells,
    /// The PDF could not be parsed.
    #[error("{0}")]
    Pdf(String),
    /// A PDF page's content is larger than upstream's limit.
    #[error("page {0} content stream exceeds 32 MB limit")]
    PdfPageTooLarge(usize),
    /// The asked PDF page range is not within the document.
    #[error("document has {total} {}; use a page number or range within 1-{total}",
        if *total == 1 { "page" } else { "pages" })]
    PageRange {
        /// Pages in the document.
        total: usize,
    },
}

/// One extracted line and where it sits in the document (upstream's
/// `LocatedDocumentLine`): `page=2,line=3`, `paragraph=4`, `sheet='S',row=5`,
/// `slide=1,line=2`. Headers and blank separators have no locator and are not searched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line's text.
    pub text: String,
    /// Where it sits; empty for a header or a blank separator.
    pub locator: String,
}

impl Line {
    fn plain(text: String) -> Self {
        Self {
            text,
            locator: String::new(),
        }
    }

    fn located(text: String, locator: String) -> Self {
        Self { text, locator }
    }

    /// Returns whether grep searches this line (it has a locator).
    pub fn searchable(&self) -> bool {
        !self.locator.is_empty()
    }
}

/// A document's lines as grep reads them, and the PDF page range to read next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Every extracted line, headers and separators included.
    pub lines: Vec<Line>,
    /// `pages='101-200'` when a PDF has pages after the range read.
    pub continuation: Option<String>,
}

/// Returns the extracted lines of an Office document (`kind` is not [`Kind::Pdf`]): the
/// sequence upstream's `open_document_line_source` yields, headers and blank separators
/// included.
pub fn office_lines(path: &Path, kind: Kind) -> Result<Vec<String>, Error> {
    let lines = located_office(path, kind)?;
    Ok(lines.into_iter().map(|line| line.text).collect())
}

/// Returns a document's located lines (upstream's `open_document_line_source`): for a
/// PDF the pages in `pages` (all when `None`), at most [`pdf::MAX_SEARCH_PAGES`] of them.
pub fn located(path: &Path, kind: Kind, pages: Option<&str>) -> Result<Located, Error> {
    if kind != Kind::Pdf {
        let lines = located_office(path, kind)?;
        return Ok(Located {
            lines,
            continuation: None,
        });
    }
    if std::fs::metadata(path)?.len() > MAX_EXTRACT_FILE_BYTES {
        return Err(Error::TooLarge);
    }
    pdf::located(&std::fs::read(path)?, pages)
}

fn located_office(path: &Path, kind: Kind) -> Result<Vec<Line>, Error> {
    if std::fs::metadata(path)?.len() > MAX_EXTRACT_FILE_BYTES {
        return Err(Error::TooLarge);
    }
    let bytes = std::fs::read(path)?;
    let mut archive = archive::Archive::open(&bytes)?;
    match kind {
        Kind::Docx => Ok(docx_located(docx::lines(&mut archive)?)),
        Kind::Xlsx => xlsx::lines(&bytes),
        Kind::Pptx => pptx::lines(&mut archive),
        Kind::Pdf => Err(Error::Open {
            kind,
            reason: "not an Office document".into(),
        }),
    }
}

/// Locates DOCX lines: each non-blank line is the next `paragraph=N`.
fn docx_located(lines: Vec<String>) -> Vec<Line> {
    let mut paragraph = 0;
    let locate = |text: String| {
        if text.is_empty() {
            return Line::plain(text);
        }
        paragraph += 1;
        Line::located(text, format!("paragraph={paragraph}"))
    };
    lines.into_iter().map(locate).collect()
}

/// Splits `text` into lines the way Python's `str.splitlines()` does: at `\n`, `\r`,
/// `\r\n`, and the vertical tab, form feed, file/group/record separators, NEL and the
/// Unicode line and paragraph separators (PowerPoint line breaks arrive as `\v`).
fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r'
                | '\u{0B}'
                | '\u{0C}'
                | '\u{1C}'
                | '\u{1D}'
                | '\u{1E}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !is_break {
            continue;
        }
        lines.push(&text[start..i]);
        start = i + c.len_utf8();
        if c == '\r' && chars.peek().is_some_and(|&(_, next)| next == '\n') {
            chars.next();
            start += 1;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

#[cfg(test)]
pub(crate) mod testdocs;

#[cfg(test)]
mod upstream_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_like_python_splitlines() {
        assert_eq!(
            split_lines("a\r\nb\rc\u{0B}d\u{2028}e\n\nf\n"),
            ["a", "b", "c", "d", "e", "", "f"]
        );
        assert_eq!(split_lines(""), Vec::<&str>::new());
        assert_eq!(split_lines("👩‍👩‍👧‍👦\n"), ["👩‍👩‍👧‍👦"]);
    }

    #[test]
    fn kinds_come_from_the_extension_in_any_case() {
        assert_eq!(Kind::of(Path::new("/a/B.PDF")), Some(Kind::Pdf));
        assert_eq!(Kind::of(Path::new("报告.Docx")), Some(Kind::Docx));
        assert_eq!(Kind::of(Path::new("x.xlsx")), Some(Kind::Xlsx));
        assert_eq!(Kind::of(Path::new("x.pptx")), Some(Kind::Pptx));
        assert_eq!(Kind::of(Path::new("x.doc")), None);
        assert_eq!(Kind::of(Path::new("pdf")), None);
    }
}
