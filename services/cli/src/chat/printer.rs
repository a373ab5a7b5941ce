//! How `nanobot agent` shows a reply: a spinner on the terminal until the first token, the
//! stream deltas as they arrive, progress and tool hints on stderr, and the final reply
//! reconciled with what was streamed (only the missing tail is printed; when deltas were lost
//! or differ, the final text is printed whole on a new line, since it is authoritative).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Frames of the "thinking" spinner.
const FRAMES: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const FRAME_EVERY: Duration = Duration::from_millis(80);

/// A spinner on stderr, drawn only when stderr is a terminal.
pub(super) struct Spinner {
    enabled: bool,
    /// Whether a frame may be drawn; checked and cleared under the lock, so no frame is drawn
    /// after [`Spinner::stop`] returns.
    active: Arc<Mutex<bool>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Spinner {
    /// Returns a spinner that draws when `enabled` (pass whether stderr is a terminal).
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            active: Arc::new(Mutex::new(false)),
            task: None,
        }
    }

    /// Starts drawing (no-op when disabled or running).
    pub(super) fn start(&mut self) {
        if !self.enabled || self.task.is_some() {
            return;
        }
        *self.active.lock().expect("spinner lock") = true;
        let active = self.active.clone();
        self.task = Some(tokio::spawn(async move {
            for frame in FRAMES.iter().cycle() {
                {
                    let active = active.lock().expect("spinner lock");
                    if !*active {
                        return;
                    }
                    eprint!("\r{frame} thinking…");
                }
                tokio::time::sleep(FRAME_EVERY).await;
            }
        }));
    }

    /// Stops drawing and clears the line.
    pub(super) fn stop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let mut active = self.active.lock().expect("spinner lock");
        *active = false;
        eprint!("\r\x1b[2K");
        task.abort();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Prints one reply as it streams.
pub(super) struct StreamPrinter<W: Write> {
    out: W,
    prefix: &'static str,
    spinner: Spinner,
    /// Everything written to `out` for this reply (without the prefix).
    printed: String,
    /// The text of the latest streamed segment (the final reply answers with it).
    segment: String,
    /// The latest segment has ended; the next delta starts a new one.
    segment_closed: bool,
    last_seq: u32,
    /// A delta is missing: the stream cannot be trusted to equal the final text.
    gap: bool,
}

impl<W: Write> StreamPrinter<W> {
    /// Returns a printer writing to `out`, starting the reply with `prefix`.
    pub(super) fn new(out: W, prefix: &'static str, mut spinner: Spinner) -> Self {
        spinner.start();
        Self {
            out,
            prefix,
            spinner,
            printed: String::new(),
            segment: String::new(),
            segment_closed: false,
            last_seq: 0,
            gap: false,
        }
    }

    fn write(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.printed.is_empty() {
            let _ = self.out.write_all(self.prefix.as_bytes());
        }
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
        self.printed.push_str(text);
    }

    fn end_line(&mut self) {
        if !self.printed.is_empty() && !self.printed.ends_with('\n') {
            self.write("\n");
        }
    }

    /// Shows stream delta number `seq` (1, 2, …; 0 = unnumbered).
    pub(super) fn delta(&mut self, seq: u32, text: &str) {
        if seq != 0 {
            if seq <= self.last_seq {
                return;
            }
            if seq > self.last_seq + 1 {
                self.gap = true;
            }
            self.last_seq = seq;
        }
        if text.is_empty() {
            return;
        }
        self.spinner.stop();
        if self.segment_closed {
            self.segment.clear();
            self.segment_closed = false;
        }
        self.segment.push_str(text);
        self.write(text);
    }

    /// Ends one streamed segment (tools may run before the next one).
    pub(super) fn segment_end(&mut self) {
        self.end_line();
        self.segment_closed = true;
        self.spinner.start();
    }

    /// Shows a progress line or tool hint on stderr.
    pub(super) fn note(&mut self, text: &str) {
        self.spinner.stop();
        eprintln!("  ↳ {text}");
        self.spinner.start();
    }

    /// Completes the reply with its final text: the latest segment is the reply when it
    /// matches; a missing tail is added; otherwise the final text is printed whole.
    pub(super) fn finish(mut self, content: &str) -> W {
        self.spinner.stop();
        let full = content.trim();
        let streamed = self.segment.trim_start().to_string();
        let rest = full
            .strip_prefix(streamed.as_str())
            .or_else(|| full.strip_prefix(streamed.trim_end()).map(str::trim_start));
        match rest {
            Some(rest) if !self.gap && !streamed.trim().is_empty() => {
                if !rest.is_empty() && self.segment_closed {
                    self.end_line();
                }
                self.write(rest);
            }
            _ => {
                self.end_line();
                self.write(full);
            }
        }
        self.end_line();
        self.out
    }

    /// Stops the spinner after a failed turn (nothing more is printed to `out`).
    pub(super) fn abandon(mut self) -> W {
        self.spinner.stop();
        self.end_line();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printer() -> StreamPrinter<Vec<u8>> {
        StreamPrinter::new(Vec::new(), "bot: ", Spinner::new(false))
    }

    fn text(out: Vec<u8>) -> String {
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn streamed_deltas_are_printed_once_and_the_final_adds_only_the_newline() {
        let mut p = printer();
        p.delta(1, "Hello");
        p.delta(2, ", world");
        p.delta(2, ", world");
        p.segment_end();
        assert_eq!(text(p.finish("Hello, world")), "bot: Hello, world\n");
    }

    #[test]
    fn without_deltas_the_final_is_printed_with_the_prefix() {
        assert_eq!(text(printer().finish("Just this.")), "bot: Just this.\n");
    }

    #[test]
    fn a_final_longer_than_the_stream_prints_the_missing_tail() {
        let mut p = printer();
        p.delta(1, "Hello ");
        assert_eq!(text(p.finish("Hello big world")), "bot: Hello big world\n");
    }

    #[test]
    fn a_lost_or_different_delta_reprints_the_authoritative_final() {
        let mut p = printer();
        p.delta(1, "Hel");
        p.delta(3, "rld");
        assert_eq!(text(p.finish("Hello world")), "bot: Helrld\nHello world\n");
        let mut p = printer();
        p.delta(1, "<think>hmm</think>");
        assert_eq!(
            text(p.finish("Answer")),
            "bot: <think>hmm</think>\nAnswer\n"
        );
    }

    #[test]
    fn text_before_tools_and_the_answer_after_are_separate_lines() {
        let mut p = printer();
        p.delta(1, "Let me check.");
        p.segment_end();
        p.note("read_file(\"a\")");
        p.delta(2, "It says hi.");
        p.segment_end();
        let out = text(p.finish("It says hi."));
        assert_eq!(out, "bot: Let me check.\nIt says hi.\n");
        // A final that was not streamed (e.g. after tools) follows on its own line.
        let mut p = printer();
        p.delta(1, "Let me check.");
        p.segment_end();
        assert_eq!(text(p.finish("Done.")), "bot: Let me check.\nDone.\n");
    }
}
