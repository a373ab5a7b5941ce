//! A fake of the platform's public endpoints (scaffold; filled by the channel's tests).
