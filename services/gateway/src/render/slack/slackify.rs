//! A port of slackify-markdown 0.2.4 (what nanobot 0.3.5's Slack channel renders with), over
//! pulldown-cmark instead of markdown-it-py: the same CommonMark parse (tables off, `~~` strike,
//! raw HTML as text), rendered as slackify renders each token:
//! - text: `&` → `&amp;`, `<` → `&lt;` unless it opens `<@…>`, `<#…>` or `<!…>` (mentions
//!   stay), `>` → `&gt;` outside those; code is left as written;
//! - `*bold*` (plain inside headings), `_italic_`, `~strike~`, a heading `*text*`;
//! - a link `<href|text>` (`<href>` when it has no text), its URL percent-encoded as
//!   markdown-it does; an image `<src|alt>` when its URL is absolute, else its alt text;
//! - lists `•`/`◦`/`▪` and `N.` with two or three spaces, nested ones indented four spaces;
//! - a quote `> ` before its first line only; a code block ``` with its language dropped (and
//!   a first `#!` line); a rule nothing;
//! - blocks apart by one blank line (items of a tight list by a newline), never more.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

use super::url::{normalize_link, normalize_link_text, valid_link};

/// slackify's structural newline: capped at two in a row, then made `\n`.
const NL: char = '\u{2}';
const BULLETS: [&str; 3] = ["•", "◦", "▪"];

/// Returns `md` as slackify-markdown renders it (ending with one newline).
pub fn slackify(md: &str) -> String {
    let text = md
        .replace(NL, "")
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\0', "\u{FFFD}");
    let text = as_text_not_html(text);
    let mut r = Renderer::default();
    r.render(&text);
    r.flush();
    let mut out = String::with_capacity(r.out.len());
    let mut run = 0;
    for c in r.out.chars() {
        run = if c == NL { run + 1 } else { 0 };
        match c {
            NL if run <= 2 => out.push('\n'),
            NL => {}
            c => out.push(c),
        }
    }
    let kept = out.trim_end_matches('\n').len();
    out.truncate(kept);
    out.push('\n');
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Item,
    Other,
}

/// How the link being rendered ends: `>`, or (markdown-it refuses its URL) its source as text.
enum LinkEnd {
    Angle,
    Literal(String),
}

#[derive(Default)]
struct Renderer {
    out: String,
    /// Text not yet escaped: markdown-it escapes a whole run of text at once.
    text: String,
    blocks: Vec<Block>,
    /// A tight item's text is open: markdown-it closes its hidden paragraph with a newline.
    hidden_paragraph: bool,
    in_heading: bool,
    lists: usize,
    code: Option<String>,
    /// The code block is indented: markdown-it ends its text with a newline.
    indented_code: bool,
    /// Inside an image: its text is its source label, not its events.
    image_depth: usize,
    links: Vec<LinkEnd>,
    /// Events of a refused autolink to skip (its source was written as text).
    skip_depth: usize,
}

impl Renderer {
    fn render(&mut self, src: &str) {
        let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_SUBSCRIPT;
        let events: Vec<_> = Parser::new_ext(src, options).into_offset_iter().collect();
        for (i, (event, range)) in events.iter().enumerate() {
            let next_closes_link = matches!(events.get(i + 1), Some((Event::End(TagEnd::Link), _)));
            self.event(src, event.clone(), range.clone(), next_closes_link);
        }
    }

    fn push(&mut self, s: &str) {
        self.flush();
        self.out.push_str(s);
    }

    fn flush(&mut self) {
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text);
            self.out.push_str(&escape_specials(&text));
        }
    }

    /// Notes inline content; in a tight list item it opens the item's hidden paragraph.
    fn inline(&mut self) {
        if self.blocks.last() == Some(&Block::Item) {
            self.hidden_paragraph = true;
        }
    }

    fn close_hidden_paragraph(&mut self) {
        if std::mem::take(&mut self.hidden_paragraph) {
            self.push(&NL.to_string());
        }
    }

    fn event(&mut self, src: &str, event: Event<'_>, range: Range<usize>, bare_link: bool) {
        if self.skip_depth > 0 {
            match event {
                Event::Start(_) => self.skip_depth += 1,
                Event::End(_) => self.skip_depth -= 1,
                _ => {}
            }
            return;
        }
        if let Some(code) = &mut self.code
            && let Event::Text(t) = &event
        {
            code.push_str(t);
            return;
        }
        if self.image_depth > 0 {
            match event {
                Event::Start(Tag::Image { .. }) => self.image_depth += 1,
                Event::End(TagEnd::Image) => self.image_depth -= 1,
                _ => {}
            }
            return;
        }
        match event {
            Event::Start(tag) => self.start(src, tag, range, bare_link),
            Event::End(tag) => self.end(tag),
            Event::Text(t) | Event::InlineHtml(t) | Event::Html(t) => {
                self.inline();
                self.text.push_str(&t);
            }
            Event::Code(c) => {
                self.inline();
                self.push(&format!("`{c}`"));
            }
            Event::SoftBreak | Event::HardBreak => {
                self.inline();
                self.push("\n");
            }
            Event::Rule => self.close_hidden_paragraph(),
            _ => {}
        }
    }

    fn start(&mut self, src: &str, tag: Tag<'_>, range: Range<usize>, bare_link: bool) {
        let inline = matches!(
            tag,
            Tag::Emphasis
                | Tag::Strong
                | Tag::Strikethrough
                | Tag::Subscript
                | Tag::Link { .. }
                | Tag::Image { .. }
        );
        if inline {
            self.inline();
        } else {
            self.close_hidden_paragraph();
            self.blocks.push(match tag {
                Tag::Item => Block::Item,
                _ => Block::Other,
            });
        }
        match tag {
            Tag::Heading { .. } => {
                self.in_heading = true;
                self.push("*");
            }
            Tag::BlockQuote(_) => self.push("> "),
            Tag::CodeBlock(kind) => {
                self.flush();
                self.code = Some(String::new());
                self.indented_code = matches!(kind, CodeBlockKind::Indented);
            }
            Tag::List(_) => self.lists += 1,
            Tag::Item => {
                let indent = "    ".repeat(self.lists.saturating_sub(1));
                let marker = match ordered_number(&src[range]) {
                    Some(n) => format!("{n}.  "),
                    None => format!("{}   ", BULLETS[self.lists.clamp(1, 3) - 1]),
                };
                self.push(&format!("{indent}{marker}"));
            }
            Tag::Emphasis => self.push("_"),
            Tag::Strong if !self.in_heading => self.push("*"),
            Tag::Strikethrough | Tag::Subscript => self.push("~"),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => self.link(src, range, link_type, &dest_url, bare_link),
            Tag::Image {
                dest_url, title, ..
            } => {
                self.image(src, range, &dest_url, &title);
                self.image_depth = 1;
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        let inline = matches!(
            tag,
            TagEnd::Emphasis
                | TagEnd::Strong
                | TagEnd::Strikethrough
                | TagEnd::Subscript
                | TagEnd::Link
                | TagEnd::Image
        );
        if !inline {
            if tag == TagEnd::Item {
                self.close_hidden_paragraph();
            }
            self.hidden_paragraph = false;
            self.blocks.pop();
        }
        match tag {
            TagEnd::Paragraph => self.push(&format!("{NL}{NL}")),
            TagEnd::Heading(_) => {
                self.in_heading = false;
                self.push(&format!("*{NL}{NL}"));
            }
            TagEnd::BlockQuote(_) => self.push(&NL.to_string()),
            TagEnd::CodeBlock => {
                let mut code = self.code.take().unwrap_or_default();
                if self.indented_code && !code.ends_with('\n') {
                    code.push('\n');
                }
                self.push(&format!("```\n{}```\n", strip_shebang(&code)));
            }
            TagEnd::List(_) => {
                self.lists = self.lists.saturating_sub(1);
                self.push(&NL.to_string());
            }
            TagEnd::Emphasis => self.push("_"),
            TagEnd::Strong if !self.in_heading => self.push("*"),
            TagEnd::Strikethrough | TagEnd::Subscript => self.push("~"),
            TagEnd::Link => match self.links.pop() {
                Some(LinkEnd::Literal(tail)) => self.text.push_str(&tail),
                _ => self.push(">"),
            },
            _ => {}
        }
    }

    fn link(&mut self, src: &str, range: Range<usize>, kind: LinkType, dest: &str, bare: bool) {
        let autolink = matches!(kind, LinkType::Autolink | LinkType::Email);
        let href = match kind {
            LinkType::Email => normalize_link(&format!("mailto:{dest}")),
            _ => normalize_link(dest),
        };
        if !valid_link(&href) {
            if autolink {
                self.text.push_str(&src[range]);
                self.skip_depth = 1;
            } else {
                self.text.push('[');
                let tail = &src[range.clone()][label_end(&src[range.clone()], 1)..];
                self.links.push(LinkEnd::Literal(tail.to_string()));
            }
            return;
        }
        self.links.push(LinkEnd::Angle);
        if bare {
            self.push(&format!("<{href}"));
        } else {
            self.push(&format!("<{href}|"));
        }
        if autolink {
            self.text.push_str(&normalize_link_text(dest));
            self.skip_depth = 1;
            self.links.pop();
            self.flush();
            self.out.push('>');
        }
    }

    fn image(&mut self, src: &str, range: Range<usize>, dest: &str, title: &CowStr<'_>) {
        let source = &src[range];
        let label = &source[2.min(source.len())..label_end(source, 2).max(2.min(source.len()))];
        let display = if label.is_empty() { title } else { label };
        let src_url = normalize_link(dest);
        if !valid_link(&src_url) {
            self.text.push_str(source);
            return;
        }
        if has_scheme_and_host(&src_url) {
            let text = if display.is_empty() {
                format!("<{src_url}>")
            } else {
                format!("<{src_url}|{display}>")
            };
            self.push(&text);
        } else {
            self.push(display);
        }
    }
}

/// slackify's text escaping (`escape_specials`).
pub fn escape_specials(text: &str) -> String {
    let text = text.replace('&', "&amp;");
    let mut lt = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('<', Some('@' | '#' | '!')) => lt.push('<'),
            ('<', _) => lt.push_str("&lt;"),
            (c, _) => lt.push(c),
        }
    }
    let mut mentions = Vec::new();
    let mut from = 0;
    while let Some(open) = lt[from..].find('<').map(|p| from + p) {
        let after = &lt[open + 1..];
        match (after.chars().next(), after.find('>')) {
            (Some('@' | '#' | '!'), Some(close)) => {
                mentions.push(open..open + 1 + close + 1);
                from = open + 1 + close + 1;
            }
            _ => from = open + 1,
        }
    }
    let mut out = String::with_capacity(lt.len());
    for (i, c) in lt.char_indices() {
        if c == '>' && !mentions.iter().any(|m| m.contains(&i)) {
            out.push_str("&gt;");
        } else {
            out.push(c);
        }
    }
    out
}

/// The number an ordered item was written with (markdown-it keeps it as typed).
fn ordered_number(item_source: &str) -> Option<&str> {
    let s = item_source.trim_start_matches([' ', '\t']);
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let marker = s[digits..].chars().next();
    (digits > 0 && matches!(marker, Some('.' | ')'))).then(|| &s[..digits])
}

/// Where the label that opens at `from` (just after `[` or `![`) closes: its `]`.
fn label_end(source: &str, from: usize) -> usize {
    let mut depth = 0usize;
    let mut escaped = false;
    for (i, c) in source.char_indices().skip_while(|(i, _)| *i < from) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' => depth += 1,
            ']' if depth == 0 => return i,
            ']' => depth -= 1,
            _ => {}
        }
    }
    source.len()
}

/// slackify drops a first line starting `#!` from code (`re.sub(r"^#!.*?\n", "", …)`).
fn strip_shebang(code: &str) -> &str {
    match code.strip_prefix("#!").and_then(|rest| rest.find('\n')) {
        Some(nl) => &code[2 + nl + 1..],
        None => code,
    }
}

/// markdown-it (html off) reads what would open an HTML block as text, and such a line never
/// interrupts a paragraph: a backslash before each such line's `<` makes pulldown-cmark read
/// it the same way (a line revealed as an HTML block by an earlier escape is escaped next).
fn as_text_not_html(mut text: String) -> String {
    const OPTIONS: Options = Options::ENABLE_STRIKETHROUGH.union(Options::ENABLE_SUBSCRIPT);
    for _ in 0..16 {
        let mut in_block = false;
        let mut escapes = Vec::new();
        for (event, range) in Parser::new_ext(&text, OPTIONS).into_offset_iter() {
            match event {
                Event::Start(Tag::HtmlBlock) => in_block = true,
                Event::End(TagEnd::HtmlBlock) => in_block = false,
                Event::Html(line) if in_block => {
                    let indent = line.len() - line.trim_start_matches(' ').len();
                    if opens_html(&line[indent..]) {
                        escapes.push(range.start + indent);
                    }
                }
                _ => {}
            }
        }
        if escapes.is_empty() {
            break;
        }
        for at in escapes.into_iter().rev() {
            text.insert(at, '\\');
        }
    }
    text
}

/// `line` starts like an HTML tag, comment or declaration (not an autolink).
fn opens_html(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('<') else {
        return false;
    };
    let scheme = rest.find(':').is_some_and(|c| {
        (2..=32).contains(&c)
            && rest[..c]
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "+.-".contains(ch))
    });
    let autolink = scheme
        && rest
            .find('>')
            .is_some_and(|end| !rest[..end].contains([' ', '<']));
    !autolink
        && rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?'))
}

/// Python's `urlparse(src)` has both a scheme and a network location.
fn has_scheme_and_host(url: &str) -> bool {
    let Some(colon) = url.find(':') else {
        return false;
    };
    let scheme = &url[..colon];
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let rest = &url[colon + 1..];
    scheme_ok
        && rest.strip_prefix("//").is_some_and(|r| {
            r.split(['/', '?', '#'])
                .next()
                .is_some_and(|host| !host.is_empty())
        })
}
