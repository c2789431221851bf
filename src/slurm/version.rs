//! Which slurmrestd REST API version the facade speaks (the generated client's, see
//! `openapi/README.md`).

/// The REST API version this facade speaks.
pub const API_VERSION: &str = "v0.0.42";
