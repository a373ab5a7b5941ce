//! `nanobot.bot` and `nanobot.channel` on every span of a unit of work, in every process. The
//! span that starts the work (a channel's receive span, the API request, a cron fire, a
//! heartbeat) is made a root carrying both as W3C baggage ([`root`]); OpenTelemetry hands a
//! span's baggage to its children, [`bus`](crate::bus) sends it in the NATS headers beside the
//! `traceparent`, and [`TagProcessor`] writes it onto each span as it starts. Span code names
//! neither: a new span under a tagged one is tagged.

use opentelemetry::baggage::BaggageExt as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The bot's id.
pub const BOT: &str = "nanobot.bot";
/// The channel the work came from (`telegram`, `api`, `cron`, …).
pub const CHANNEL: &str = "nanobot.channel";
/// The session a turn belongs to, on the turn's spans (GenAI's conversation id).
pub const CONVERSATION: &str = "gen_ai.conversation.id";

/// Makes `span` the root of a new trace whose spans, here and in every process the work
/// reaches, carry `bot` and `channel`. Call it before the span is entered or its context read
/// (an already started span keeps its parent and is not tagged).
pub fn root(span: &tracing::Span, bot: &str, channel: &str) {
    let _ = span.set_parent(root_context(bot, channel));
}

/// The parent context of a [`root`] span: no span, the tags as baggage.
pub fn root_context(bot: &str, channel: &str) -> Context {
    let tags = [
        KeyValue::new(BOT, bot.to_string()),
        KeyValue::new(CHANNEL, channel.to_string()),
    ];
    Context::new().with_baggage(tags)
}

/// Makes `span` a child of `parent` (the context carried by a message) whose spans, and the
/// spans of the work it sends on, carry `conversation` as [`CONVERSATION`] beside the tags
/// `parent` carries.
pub fn in_conversation(span: &tracing::Span, parent: Context, conversation: &str) {
    let mut tags: Vec<KeyValue> = parent
        .baggage()
        .iter()
        .map(|(k, (v, _))| KeyValue::new(k.clone(), v.clone()))
        .collect();
    tags.push(KeyValue::new(CONVERSATION, conversation.to_string()));
    let _ = span.set_parent(parent.with_baggage(tags));
}

/// Copies the tags of a span's baggage onto the span as it starts.
#[derive(Debug, Default)]
pub struct TagProcessor;

impl SpanProcessor for TagProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        use opentelemetry::trace::Span as _;
        let baggage = cx.baggage();
        for key in [BOT, CHANNEL, CONVERSATION] {
            if let Some(value) = baggage.get(key) {
                span.set_attribute(KeyValue::new(key, value.clone()));
            }
        }
    }

    fn on_end(&self, _span: SpanData) {}

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::{SpanId, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Keeps every ended span.
    #[derive(Debug, Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Recorder {
        fn on_start(&self, _span: &mut Span, _cx: &Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    fn attr(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn a_roots_bot_and_channel_reach_every_span_under_it_across_the_bus_headers() {
        crate::telemetry::install_propagator();
        let recorder = Recorder::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(TagProcessor)
            .with_span_processor(recorder.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(
            tracing_opentelemetry::layer()
                .with_context_activation(false)
                .with_tracer(provider.tracer("test")),
        );
        tracing::subscriber::with_default(subscriber, || {
            let receive = tracing::info_span!(parent: None, "receive");
            root(&receive, "机器人-🤖", "telegram");
            let publish = tracing::info_span!(parent: &receive, "publish");
            let mut headers = async_nats::HeaderMap::new();
            publish.in_scope(|| crate::telemetry::inject_current(&mut headers));
            // Another process: the headers are all it has.
            let turn = tracing::info_span!(parent: None, "turn");
            crate::telemetry::set_parent_from(&turn, Some(&headers));
            let chat = tracing::info_span!(parent: &turn, "chat");
            let untagged = tracing::info_span!(parent: None, "elsewhere");
            drop((chat, turn, publish, receive, untagged));
        });
        let spans = recorder.0.lock().unwrap().clone();
        let named = |name: &str| spans.iter().find(|s| s.name == name).unwrap().clone();
        let receive = named("receive");
        assert_eq!(receive.parent_span_id, SpanId::INVALID, "receive is a root");
        assert_eq!(
            named("turn").parent_span_id,
            named("publish").span_context.span_id()
        );
        for name in ["receive", "publish", "turn", "chat"] {
            let span = named(name);
            assert_eq!(attr(&span, BOT).as_deref(), Some("机器人-🤖"), "{name}");
            assert_eq!(attr(&span, CHANNEL).as_deref(), Some("telegram"), "{name}");
            assert_eq!(
                span.span_context.trace_id(),
                receive.span_context.trace_id()
            );
        }
        assert_eq!(attr(&named("elsewhere"), BOT), None);
    }
}
