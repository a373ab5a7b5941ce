//! PDF: the text of a page range, each page that has text as `--- Page N ---` and its
//! lines, pages apart by a blank line, capped at a character budget (upstream's
//! `extract_pdf_pages`). Glyphs are decoded by `pdf-extract`; lines and spaces come from
//! where glyphs sit, as pypdf places them: a new line when the baseline moves by more than
//! 0.8 of the font size, a space when a glyph starts a fifth of an em or more after the
//! previous one ends.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pdf_extract::{MediaBox, OutputDev, OutputError, Transform};

use super::{Error, Line, Located, split_lines};

/// Most pages one grep of a PDF reads (upstream's `_MAX_PDF_ATTACHMENT_PAGES`).
pub const MAX_SEARCH_PAGES: usize = 100;
/// Largest decoded content of one page (32 MiB).
const MAX_CONTENT_STREAM_BYTES: usize = 32 * 1024 * 1024;

/// The text of a page range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfText {
    /// The pages' text with headers; ends in `... (truncated at N chars)` when cut.
    pub text: String,
    /// Pages in the document.
    pub total_pages: usize,
    /// First page read, 0-based.
    pub start: usize,
    /// Last page read, 0-based (the page cut short when the budget ran out).
    pub end: usize,
}

/// Returns the text of `pages` (`"7"` or `"2-5"`, 1-based; all when `None` or empty), at
/// most `max_pages` of them and `max_chars` characters.
pub fn extract(
    bytes: &[u8],
    pages: Option<&str>,
    max_pages: usize,
    max_chars: usize,
) -> Result<PdfText, Error> {
    if bytes.is_empty() {
        return Err(Error::Pdf("Cannot read an empty file".into()));
    }
    // pdf-extract panics on some malformed documents; a bad file must not end the call.
    catch_unwind(AssertUnwindSafe(|| {
        extract_pages(bytes, pages, max_pages, max_chars)
    }))
    .unwrap_or_else(|_| Err(Error::Pdf("the PDF could not be parsed".into())))
}

fn extract_pages(
    bytes: &[u8],
    pages: Option<&str>,
    max_pages: usize,
    max_chars: usize,
) -> Result<PdfText, Error> {
    let mut collector = Collector::new(max_chars);
    let walked = walk_pages(bytes, pages, max_pages, |index, text| {
        collector.add(&format!("--- Page {} ---\n{text}", index + 1), "\n\n")
    })?;
    Ok(PdfText {
        text: collector.render(),
        total_pages: walked.total_pages,
        start: walked.start,
        end: walked.end,
    })
}

/// Returns the located lines of `pages` (all when `None`), at most
/// [`MAX_SEARCH_PAGES`] of them, as upstream's grep reads a PDF: `--- Page N ---` headers
/// and blank lines unlocated, each other line `page=N,line=K`; and the next range when
/// pages remain.
pub fn located(bytes: &[u8], pages: Option<&str>) -> Result<Located, Error> {
    if bytes.is_empty() {
        return Err(Error::Pdf("Cannot read an empty file".into()));
    }
    let mut lines = Vec::new();
    let walk = |lines: &mut Vec<Line>| {
        walk_pages(bytes, pages, MAX_SEARCH_PAGES, |index, text| {
            if !lines.is_empty() {
                lines.push(Line::plain(String::new()));
            }
            lines.push(Line::plain(format!("--- Page {} ---", index + 1)));
            let mut number = 0;
            for line in split_lines(text) {
                if line.is_empty() {
                    lines.push(Line::plain(String::new()));
                    continue;
                }
                number += 1;
                let locator = format!("page={},line={number}", index + 1);
                lines.push(Line::located(line.to_string(), locator));
            }
            true
        })
    };
    let walked = catch_unwind(AssertUnwindSafe(|| walk(&mut lines)))
        .unwrap_or_else(|_| Err(Error::Pdf("the PDF could not be parsed".into())))?;
    let continuation = (walked.total_pages > 0 && walked.end + 1 < walked.total_pages).then(|| {
        let next_end = (walked.end + 1 + MAX_SEARCH_PAGES).min(walked.total_pages);
        format!("pages='{}-{next_end}'", walked.end + 2)
    });
    Ok(Located {
        lines,
        continuation,
    })
}

/// The pages one walk covered.
struct Walked {
    total_pages: usize,
    start: usize,
    end: usize,
}

/// Calls `visit` with the 0-based index and trimmed text of each page with text in
/// `pages` (at most `max_pages`), until it returns `false` (`end` is then that page).
fn walk_pages(
    bytes: &[u8],
    pages: Option<&str>,
    max_pages: usize,
    mut visit: impl FnMut(usize, &str) -> bool,
) -> Result<Walked, Error> {
    let mut doc = pdf_extract::Document::load_mem(bytes).map_err(|e| Error::Pdf(e.to_string()))?;
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        return Err(Error::Pdf("File has not been decrypted".into()));
    }
    let page_ids: Vec<(u32, pdf_extract::ObjectId)> = doc.get_pages().into_iter().collect();
    let total_pages = page_ids.len();
    if total_pages == 0 {
        return Ok(Walked {
            total_pages,
            start: 0,
            end: 0,
        });
    }
    let (start, asked_end) = page_range(pages, total_pages)?;
    let mut end = asked_end.min(start + max_pages.max(1) - 1);
    for (index, &(number, id)) in page_ids.iter().enumerate().take(end + 1).skip(start) {
        let content = doc
            .get_page_content(id)
            .map_err(|e| Error::Pdf(e.to_string()))?;
        if content.len() > MAX_CONTENT_STREAM_BYTES {
            return Err(Error::PdfPageTooLarge(index + 1));
        }
        let mut page = PageText::default();
        pdf_extract::output_doc_page(&doc, &mut page, number)
            .map_err(|e| Error::Pdf(format!("{e:?}")))?;
        let text = page.text.trim();
        if text.is_empty() {
            continue;
        }
        if !visit(index, text) {
            end = index;
            break;
        }
    }
    Ok(Walked {
        total_pages,
        start,
        end,
    })
}

/// Returns the 0-based first and last page of `pages` within `total` pages.
fn page_range(pages: Option<&str>, total: usize) -> Result<(usize, usize), Error> {
    let Some(pages) = pages.filter(|p| !p.is_empty()) else {
        return Ok((0, total - 1));
    };
    let invalid = || Error::PageRange { total };
    let bounds: Vec<&str> = pages.trim().split('-').collect();
    let (first, last) = match bounds.as_slice() {
        [one] => (*one, *one),
        [first, last] => (*first, *last),
        _ => return Err(invalid()),
    };
    let start: i64 = first.trim().parse().map_err(|_| invalid())?;
    let end: i64 = last.trim().parse().map_err(|_| invalid())?;
    let total_i64 = i64::try_from(total).unwrap_or(i64::MAX);
    if start < 1 || end < start || start > total_i64 {
        return Err(invalid());
    }
    let start_index = usize::try_from(start - 1).map_err(|_| invalid())?;
    let end_index = usize::try_from(end.min(total_i64) - 1).map_err(|_| invalid())?;
    Ok((start_index, end_index))
}

/// Text bounded at a number of characters: the chunk that overflows is cut at the
/// budget and the text ends in `... (truncated at N chars)`.
pub(super) struct Collector {
    limit: usize,
    text: String,
    chars: usize,
    truncated: bool,
}

impl Collector {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            text: String::new(),
            chars: 0,
            truncated: false,
        }
    }

    /// Adds `chunk` (after `separator` unless it is the first); returns `false` once the
    /// budget is spent.
    pub(super) fn add(&mut self, chunk: &str, separator: &str) -> bool {
        if chunk.is_empty() {
            return true;
        }
        let prefix = if self.text.is_empty() { "" } else { separator };
        let length = prefix.chars().count() + chunk.chars().count();
        let remaining = self.limit - self.chars;
        if length > remaining {
            self.text
                .extend(prefix.chars().chain(chunk.chars()).take(remaining));
            self.chars = self.limit;
            self.truncated = true;
            return false;
        }
        self.text.push_str(prefix);
        self.text.push_str(chunk);
        self.chars += length;
        true
    }

    pub(super) fn render(self) -> String {
        if self.truncated {
            return format!("{}... (truncated at {} chars)", self.text, self.limit);
        }
        self.text
    }
}

/// Collects one page's glyphs as lines of text.
#[derive(Default)]
struct PageText {
    text: String,
    /// Baseline of the previous glyph.
    last_y: f64,
    /// Where the previous glyph ended on its line.
    last_end: f64,
}

impl OutputDev for PageText {
    fn begin_page(
        &mut self,
        _page: u32,
        _media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        glyph: &str,
    ) -> Result<(), OutputError> {
        let (x, y) = (trm.m31, trm.m32);
        let size_x = font_size * trm.m11.hypot(trm.m12);
        let size_y = font_size * trm.m21.hypot(trm.m22);
        if !self.text.is_empty() {
            let moved_down = (y - self.last_y).abs() > 0.8 * size_y;
            let gap = x - self.last_end > 0.2 * size_x;
            if moved_down && !self.text.ends_with('\n') {
                self.text.push('\n');
            } else if !moved_down && gap && !self.text.ends_with([' ', '\n']) && glyph != " " {
                self.text.push(' ');
            }
        }
        self.text.push_str(glyph);
        self.last_y = y;
        self.last_end = x + width * size_x;
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_ranges_read_as_upstream_reads_them() {
        assert_eq!(page_range(None, 3).unwrap(), (0, 2));
        assert_eq!(page_range(Some(""), 3).unwrap(), (0, 2));
        assert_eq!(page_range(Some(" 2 "), 3).unwrap(), (1, 1));
        assert_eq!(page_range(Some("2-9"), 3).unwrap(), (1, 2));
        for bad in ["0", "4", "3-2", "-2", "2-", "1-2-3", "x", "二"] {
            assert_eq!(
                page_range(Some(bad), 3).unwrap_err().to_string(),
                "document has 3 pages; use a page number or range within 1-3",
                "{bad}"
            );
        }
        assert_eq!(
            page_range(Some("2"), 1).unwrap_err().to_string(),
            "document has 1 page; use a page number or range within 1-1"
        );
    }

    #[test]
    fn the_collector_cuts_at_the_budget_in_code_points_as_upstream() {
        let mut c = Collector::new(5);
        assert!(c.add("你好", "\n\n"));
        assert!(!c.add("👩‍👩‍👧‍👦", "\n\n"));
        assert_eq!(c.render(), "你好\n\n👩... (truncated at 5 chars)");
    }
}
