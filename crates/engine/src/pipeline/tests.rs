//! Unit tests of pipeline stages (no server).
