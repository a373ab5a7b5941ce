use futures::StreamExt as _;
use proptest::prelude::*;

use super::*;
use crate::utf8::Utf8Decoder;

/// Text that breaks byte-counting code: CJK, emoji with ZWJ sequences, skin tones and flags,
/// combining marks, right-to-left scripts, and a line break inside data.
pub(crate) const CORPUS: &[&str] = &[
    "你好，世界！🐈 naïve café",
    "日本語のテキスト、한국어 텍스트",
    "👩‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🇨🇳🇺🇸🇯🇵 flags",
    "e\u{301}te\u{301} a\u{30a}ngstro\u{308}m Z\u{335}\u{30c}a\u{337}l\u{336}g\u{334}o",
    "مرحبا بالعالم — שלום עולם",
    "mixed 中文 and English with \"quotes\" and \\backslashes\\",
    "𝕬𝖑𝖕𝖍𝖆 𝟙𝟚𝟛 𠀀𠀁 (astral plane)",
    "two\nlines 二行",
];

fn body(events: &[(&str, &str)], eol: &str) -> Vec<u8> {
    let mut out = String::from(": a comment\n");
    for (name, data) in events {
        if !name.is_empty() {
            out.push_str(&format!("event: {name}{eol}"));
        }
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}{eol}"));
        }
        out.push_str(eol);
    }
    out.into_bytes()
}

fn read(chunks: Vec<Vec<u8>>) -> Vec<Event> {
    let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    futures::executor::block_on(events(stream).map(|e| e.expect("an event")).collect())
}

fn cut(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([bytes.len()]) {
        out.push(bytes[start..p].to_vec());
        start = p;
    }
    out
}

fn expected(events: &[(&str, &str)]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|(n, d)| {
            let name = if n.is_empty() { "message" } else { n };
            (name.to_string(), d.to_string())
        })
        .collect()
}

fn names_and_data(events: Vec<Event>) -> Vec<(String, String)> {
    events.into_iter().map(|e| (e.event, e.data)).collect()
}

fn corpus_events() -> Vec<(&'static str, &'static str)> {
    CORPUS
        .iter()
        .enumerate()
        .map(|(i, text)| {
            (
                if i % 2 == 0 {
                    ""
                } else {
                    "content_block_delta"
                },
                *text,
            )
        })
        .collect()
}

#[test]
fn every_corpus_text_survives_a_split_at_every_byte_offset() {
    let events = corpus_events();
    for eol in ["\n", "\r\n", "\r"] {
        let bytes = body(&events, eol);
        for at in 0..=bytes.len() {
            let got = names_and_data(read(cut(&bytes, &[at])));
            assert_eq!(got, expected(&events), "eol {eol:?}, split at byte {at}");
        }
    }
}

#[test]
fn a_stream_dripped_one_byte_at_a_time_gives_the_original_text() {
    let events = corpus_events();
    let bytes = body(&events, "\r\n");
    let single: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
    assert_eq!(names_and_data(read(single)), expected(&events));
}

#[test]
fn multi_line_data_is_joined_with_a_newline_as_the_spec_says() {
    let got = read(vec![
        b"data: {\"a\":\ndata:  1}\n\nevent: x\ndata\n\n".to_vec(),
    ]);
    assert_eq!(got[0].data, "{\"a\":\n 1}");
    assert_eq!((got[1].event.as_str(), got[1].data.as_str()), ("x", ""));
}

#[test]
fn invalid_bytes_become_a_replacement_character_and_the_stream_goes_on() {
    let got = read(vec![
        b"data: a\xffb\n\ndata: \xe4\xbd".to_vec(),
        b"\xa0\n\n".to_vec(),
    ]);
    let data: Vec<&str> = got.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(data, ["a\u{fffd}b", "你"]);
}

#[test]
fn a_character_cut_off_by_the_end_of_the_body_is_not_silently_dropped() {
    let mut decoder = Utf8Decoder::default();
    assert_eq!(decoder.feed("猫".as_bytes().get(..2).unwrap()), "");
    assert_eq!(decoder.finish(), "\u{fffd}");
}

#[test]
fn a_broken_connection_is_reported_as_a_transport_error() {
    let chunks = vec![
        Ok(b"data: one\n\n".to_vec()),
        Err("reset by peer".to_string()),
    ];
    let got: Vec<_> = futures::executor::block_on(events(futures::stream::iter(chunks)).collect());
    assert_eq!(got[0].as_ref().map(|e| e.data.as_str()), Ok("one"));
    assert!(matches!(&got[1], Err(SseError::Transport(e)) if e.contains("reset")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn events_survive_any_split_of_the_body(
        picks in proptest::collection::vec(0..CORPUS.len(), 1..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
        crlf in any::<bool>(),
    ) {
        let events: Vec<(&str, &str)> = picks.iter().map(|i| ("", CORPUS[*i])).collect();
        let bytes = body(&events, if crlf { "\r\n" } else { "\n" });
        prop_assert_eq!(names_and_data(read(cut(&bytes, &cuts))), expected(&events));
    }

    #[test]
    fn decoded_text_equals_the_input_for_any_chunking(
        text in "\\PC{0,64}",
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
    ) {
        let mut decoder = Utf8Decoder::default();
        let mut out = String::new();
        for chunk in cut(text.as_bytes(), &cuts) {
            out.push_str(&decoder.feed(&chunk));
        }
        out.push_str(&decoder.finish());
        prop_assert_eq!(out, text);
    }
}
