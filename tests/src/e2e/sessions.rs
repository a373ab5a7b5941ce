//! Sessions across runners: the lease and fenced writes against a real Redis (`lease`).

mod lease;
