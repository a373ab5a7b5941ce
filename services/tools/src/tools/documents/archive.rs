//! The OOXML container: upstream's safety checks before any XML is parsed (member count,
//! encryption, expanded sizes), then parts by name and relationship targets.

use std::io::{Cursor, Read as _};

use super::Error;

/// Most members an Office archive may hold.
const MAX_MEMBERS: usize = 10_000;
/// Largest expanded size of one member (128 MiB).
const MAX_MEMBER_BYTES: u64 = 128 * 1024 * 1024;
/// Largest expanded size of all members together (256 MiB).
const MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;

/// Relationship type of a package's main document part.
const OFFICE_DOCUMENT_REL: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument";

/// An Office document's ZIP container that passed the safety checks.
pub(super) struct Archive<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
}

impl<'a> Archive<'a> {
    /// Opens `bytes` as a ZIP archive and checks its members against upstream's limits.
    pub(super) fn open(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| match e {
            zip::result::ZipError::InvalidArchive(_) => {
                Error::InvalidArchive("File is not a zip file".into())
            }
            other => Error::InvalidArchive(other.to_string()),
        })?;
        if zip.len() > MAX_MEMBERS {
            return Err(Error::TooManyMembers(zip.len()));
        }
        let mut total: u64 = 0;
        for index in 0..zip.len() {
            let member = zip
                .by_index_raw(index)
                .map_err(|e| Error::InvalidArchive(e.to_string()))?;
            if member.encrypted() {
                return Err(Error::Encrypted);
            }
            if member.size() > MAX_MEMBER_BYTES {
                return Err(Error::OversizedMember);
            }
            total += member.size();
            if total > MAX_TOTAL_BYTES {
                return Err(Error::ExpandsTooMuch);
            }
        }
        Ok(Self { zip })
    }

    /// Returns the text of the part at `name` (no leading `/`), if the archive has it.
    pub(super) fn part(&mut self, name: &str) -> Result<Option<String>, String> {
        let member = match self.zip.by_name(name) {
            Ok(member) => member,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let mut text = String::new();
        // The declared size was checked; a member lying about it still stops at the limit.
        member
            .take(MAX_MEMBER_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("{name}: {e}"))?;
        Ok(Some(text))
    }

    /// Returns the path of the package's main document part (`word/document.xml`).
    pub(super) fn main_part(&mut self) -> Result<String, String> {
        let rels = self.relationships("")?;
        rels.into_iter()
            .find(|rel| rel.kind == OFFICE_DOCUMENT_REL)
            .map(|rel| rel.target)
            .ok_or_else(|| "the package has no main document part".to_string())
    }

    /// Returns the path and the XML of the package's main document part.
    pub(super) fn main_document(&mut self) -> Result<(String, String), String> {
        let main = self.main_part()?;
        let xml = self
            .part(&main)?
            .ok_or_else(|| format!("there is no part {main}"))?;
        Ok((main, xml))
    }

    /// Returns the relationships of the part at `part` (`""` for the package), their
    /// targets resolved to archive paths.
    pub(super) fn relationships(&mut self, part: &str) -> Result<Vec<Relationship>, String> {
        let (dir, file) = part.rsplit_once('/').unwrap_or(("", part));
        let rels_name = if dir.is_empty() {
            format!("_rels/{file}.rels")
        } else {
            format!("{dir}/_rels/{file}.rels")
        };
        let Some(xml) = self.part(&rels_name)? else {
            return Ok(Vec::new());
        };
        let doc = roxmltree::Document::parse(&xml).map_err(|e| format!("{rels_name}: {e}"))?;
        let mut rels = Vec::new();
        for node in doc.root_element().children() {
            if !node.has_tag_name("Relationship")
                || node.attribute("TargetMode") == Some("External")
            {
                continue;
            }
            let (Some(id), Some(kind), Some(target)) = (
                node.attribute("Id"),
                node.attribute("Type"),
                node.attribute("Target"),
            ) else {
                continue;
            };
            rels.push(Relationship {
                id: id.to_string(),
                kind: kind.to_string(),
                target: join(dir, target),
            });
        }
        Ok(rels)
    }
}

/// One `<Relationship>` of a part.
pub(super) struct Relationship {
    /// `Id`, as parts reference it (`rId2`).
    pub(super) id: String,
    /// `Type` URI.
    pub(super) kind: String,
    /// The target part's path inside the archive.
    pub(super) target: String,
}

/// Resolves a relationship `target` against the directory of its source part.
fn join(dir: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if target.starts_with('/') || dir.is_empty() {
        Vec::new()
    } else {
        dir.split('/').collect()
    };
    for segment in target.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relationship_targets_resolve_against_their_part() {
        assert_eq!(join("ppt", "slides/slide1.xml"), "ppt/slides/slide1.xml");
        assert_eq!(join("ppt/slides", "../media/图.png"), "ppt/media/图.png");
        assert_eq!(join("", "word/document.xml"), "word/document.xml");
        assert_eq!(
            join("ppt", "/ppt/slides/slide2.xml"),
            "ppt/slides/slide2.xml"
        );
    }
}
