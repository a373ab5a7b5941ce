//! What grep reads of one file: a text file's lines, or a document's located lines
//! (headers and blank separators left out), and which of them match.

use grep_regex::RegexMatcher;
use grep_searcher::Searcher;
use grep_searcher::sinks::UTF8;

use super::{Finder, Found};
use crate::tools::documents::{self, Kind};
use crate::tools::search;

fn matching_lines(matcher: &RegexMatcher, text: &str) -> Vec<usize> {
    let mut hits = Vec::new();
    let sink = UTF8(|line_number, _line| {
        hits.push(usize::try_from(line_number).unwrap_or(usize::MAX));
        Ok(true)
    });
    // Searching an in-memory UTF-8 string cannot fail; an error just ends the file.
    let _ = Searcher::new().search_slice(matcher, text.as_bytes(), sink);
    hits
}

/// One searched file: its shown path, its rows and the indexes of its matching rows.
pub(super) struct Hits<'a> {
    pub(super) shown: &'a str,
    pub(super) rows: &'a [Row<'a>],
    pub(super) hits: &'a [usize],
}

/// One line as grep shows it: its number in the (extracted) text and its locator.
pub(super) struct Row<'a> {
    pub(super) text: &'a str,
    pub(super) number: usize,
    pub(super) locator: &'a str,
}

/// What one file offers the search.
pub(super) enum Lines {
    /// A text file's content.
    Text(String),
    /// A document's extracted lines.
    Document(documents::Located),
}

impl Lines {
    pub(super) fn rows(&self) -> Vec<Row<'_>> {
        match self {
            Self::Text(text) => text
                .lines()
                .enumerate()
                .map(|(i, text)| Row {
                    text,
                    number: i + 1,
                    locator: "",
                })
                .collect(),
            // Headers and blank separators are neither searched nor shown as context.
            Self::Document(doc) => doc
                .lines
                .iter()
                .enumerate()
                .filter(|(_, line)| line.searchable())
                .map(|(i, line)| Row {
                    text: &line.text,
                    number: i + 1,
                    locator: &line.locator,
                })
                .collect(),
        }
    }

    /// Returns the indexes of the rows that match.
    pub(super) fn hits(
        &self,
        matcher: &RegexMatcher,
        finder: &Finder,
        rows: &[Row<'_>],
    ) -> Vec<usize> {
        match self {
            Self::Text(text) => matching_lines(matcher, text)
                .into_iter()
                .map(|n| n.saturating_sub(1))
                .filter(|&i| i < rows.len())
                .collect(),
            Self::Document(_) => (0..rows.len())
                .filter(|&i| finder.is_match(rows[i].text))
                .collect(),
        }
    }
}

/// What reading one file gave.
pub(super) enum Source {
    Lines(Lines),
    /// Not searchable (binary, not UTF-8); counted already.
    Skip,
    /// A document that could not be read: the error for an explicitly named file.
    Fail(String),
}

/// Reads a file as text, or as a document's extracted lines; notes what was skipped.
pub(super) fn source(
    path: &std::path::Path,
    shown: &str,
    pages: Option<&str>,
    found: &mut Found,
) -> Source {
    let Some(kind) = Kind::of(path) else {
        return match std::fs::read(path) {
            Ok(raw) if !search::is_binary(&raw) => {
                String::from_utf8(raw).map_or(Source::Skip, |text| Source::Lines(Lines::Text(text)))
            }
            _ => Source::Skip,
        }
        .counted(found);
    };
    match documents::located(path, kind, pages.filter(|p| !p.is_empty())) {
        Ok(doc) => {
            if let Some(next) = &doc.continuation {
                found
                    .continuations
                    .push(format!("({shown}: continue PDF search with {next})"));
            }
            Source::Lines(Lines::Document(doc))
        }
        Err(e @ documents::Error::PageRange { .. }) => {
            found.skipped_binary += 1;
            found.document_errors.push(format!("{shown}: {e}"));
            let pages = pages.unwrap_or_default();
            Source::Fail(format!("Error: Invalid PDF page range '{pages}': {e}."))
        }
        Err(e) => {
            found.skipped_binary += 1;
            found.document_errors.push(format!("{shown}: {e}"));
            Source::Fail(format!("Error searching document {shown}: {e}"))
        }
    }
}

impl Source {
    fn counted(self, found: &mut Found) -> Self {
        if matches!(self, Self::Skip) {
            found.skipped_binary += 1;
        }
        self
    }
}
