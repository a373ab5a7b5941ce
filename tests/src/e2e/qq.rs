//! End-to-end tests of the channel through the fleet (scaffold).
