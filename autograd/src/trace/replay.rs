//! Replay of captured records.
