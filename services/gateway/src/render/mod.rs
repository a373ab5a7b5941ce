//! Rendering of the agent's Markdown replies for chat channels.
//!
//! # Layout
//! - [`telegram`]: Markdown → Telegram HTML ([`telegram::markdown_to_html`]), the plain
//!   streaming preview ([`telegram::strip_markdown`]), and splitting long replies into
//!   messages that never leave a code fence unbalanced ([`telegram::split_markdown`],
//!   [`telegram::split_markdown_html`]).
//! - [`measure`]: message lengths in each platform's unit ([`measure::Limit`]) and cuts
//!   between grapheme clusters only.
//! - [`message`]: a final text cut into messages as upstream's `split_message` (Slack, Discord).
//! - [`split`]: raw Markdown cut into chunks within a [`measure::Limit`], fences balanced.
//! - [`slack`]: Markdown → Slack mrkdwn ([`slack::markdown_to_mrkdwn`]) and long replies split
//!   into messages ([`slack::split_mrkdwn`]).

#[cfg(test)]
mod corpus;
pub mod measure;
pub mod message;
pub mod slack;
pub mod split;
pub mod telegram;
