//! What `read_file` answers for a document, in upstream's words: PDF page ranges with a
//! `pages='…'` footer, Office documents as numbered extracted lines with offset/limit
//! paging, both within the read budget.

use std::path::Path;

use super::{Kind, office_lines, pdf};

/// Most pages one PDF read returns.
pub const MAX_PDF_PAGES: usize = 20;

/// Returns the text of a PDF page range, or the error text.
pub fn read_pdf(fp: &Path, pages: Option<&str>, max_chars: usize) -> Result<String, String> {
    let bytes = std::fs::read(fp).map_err(|e| format!("Error reading PDF: {e}"))?;
    let extraction = match pdf::extract(&bytes, pages, MAX_PDF_PAGES, max_chars) {
        Ok(extraction) => extraction,
        Err(e @ super::Error::PageRange { .. }) => {
            return Err(format!(
                "Error: Invalid page range '{}': {e}.",
                pages.unwrap_or_default()
            ));
        }
        Err(e) => return Err(format!("Error reading PDF: {e}")),
    };
    if extraction.text.is_empty() {
        return Ok(format!("(PDF has no extractable text: {})", fp.display()));
    }
    let mut out = extraction.text;
    if extraction.end + 1 < extraction.total_pages {
        let next_start = extraction.end + 2;
        let next_end = (extraction.end + 1 + MAX_PDF_PAGES).min(extraction.total_pages);
        out.push_str(&format!(
            "\n\n(Showing pages {}-{} of {}. Use pages='{next_start}-{next_end}' to continue.)",
            extraction.start + 1,
            extraction.end + 1,
            extraction.total_pages
        ));
    }
    Ok(out)
}

/// Returns lines `offset..` (1-based, at most `limit`) of an Office document's extracted
/// text, numbered, with upstream's footer; or the error text.
pub fn read_office(
    fp: &Path,
    kind: Kind,
    offset: usize,
    limit: usize,
    max_chars: usize,
) -> Result<String, String> {
    let suffix = fp
        .extension()
        .map(|e| e.to_string_lossy().to_uppercase())
        .unwrap_or_default();
    let lines = office_lines(fp, kind).map_err(|e| format!("Error reading .{suffix} file: {e}"))?;
    if lines.is_empty() {
        return Ok(format!(
            "({} has no extractable text: {})",
            kind.name(),
            fp.display()
        ));
    }
    let total = lines.len();
    if offset > total {
        return Err(format!(
            "Error: offset {offset} is beyond end of extracted document ({total} lines)"
        ));
    }
    let window = Window::fill(&lines, offset, limit, max_chars);
    let next = window.end + 1;
    let footer = if window.clipped {
        format!(
            "(Document text truncated at ~128K chars; line clipped. Use offset={next} to continue.)"
        )
    } else if window.end < total {
        format!(
            "(Showing extracted lines {offset}-{}. Use offset={next} to continue.)",
            window.end
        )
    } else {
        format!("(End of document — {total} extracted lines total)")
    };
    Ok(format!("{}\n\n{footer}", window.numbered.join("\n")))
}

/// The numbered lines that fit one read.
struct Window {
    numbered: Vec<String>,
    /// Number of the last line shown.
    end: usize,
    /// The only line shown was cut to fit.
    clipped: bool,
}

impl Window {
    /// Numbers lines from `offset` until `limit` lines or `max_chars` characters; a first
    /// line longer than the budget is cut and marked with `...`.
    fn fill(lines: &[String], offset: usize, limit: usize, max_chars: usize) -> Self {
        let mut window = Self {
            numbered: Vec::new(),
            end: offset - 1,
            clipped: false,
        };
        let mut chars = 0;
        for (index, line) in lines.iter().enumerate().skip(offset - 1).take(limit) {
            let number = index + 1;
            let rendered = format!("{number}| {line}");
            let separator = usize::from(!window.numbered.is_empty());
            let length = rendered.chars().count();
            if chars + separator + length <= max_chars {
                window.numbered.push(rendered);
                chars += separator + length;
                window.end = number;
                continue;
            }
            if window.numbered.is_empty() {
                let prefix = format!("{number}| ");
                let room = max_chars.saturating_sub(prefix.chars().count() + 3);
                let head: String = line.chars().take(room).collect();
                window.numbered.push(format!("{prefix}{head}..."));
                window.end = number;
                window.clipped = true;
            }
            break;
        }
        window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn a_window_stops_at_the_limit_or_the_budget() {
        let all = lines(&["--- Slide 1 ---", "你好", "", "--- Slide 2 ---", "مرحبا"]);
        let two = Window::fill(&all, 2, 2, 1000);
        assert_eq!(two.numbered, ["2| 你好", "3| "]);
        assert_eq!((two.end, two.clipped), (3, false));
        let tight = Window::fill(&all, 1, 10, 24);
        assert_eq!(tight.numbered, ["1| --- Slide 1 ---", "2| 你好"]);
        assert_eq!(tight.end, 2);
        let wide = lines(&["👩‍👩‍👧‍👦 e\u{301}"]);
        let clipped = Window::fill(&wide, 1, 10, 7);
        assert_eq!(clipped.numbered, ["1| 👩...".to_string()]);
        assert!(clipped.clipped);
    }
}
