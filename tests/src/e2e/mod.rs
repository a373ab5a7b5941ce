//! End-to-end tests of the whole fleet, built on [`crate::harness::Fleet`] and
//! [`crate::scripted_llm::ScriptedLlm`].
