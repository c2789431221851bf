//! Not an API: the hook `fuzz/` and `tests/fuzz_corpus.rs` reach response decoding through,
//! because the generated types and the dialects are private to this module. It runs the steps
//! `SlurmClient` runs on a body — serde_json into the generated type (as progenitor does), the
//! `errors[]` check, the conversions — without HTTP. Not repeated: the client's fallbacks by HTTP status
//! alone when a failed answer holds no Slurm error number (`status_error`, which parses nothing).

use super::dialect::Dialect;
pub use super::dialect::replay::{Decoded, Endpoint, JOB, NODE};
use super::error::SlurmError;
use super::version::ApiVersion;

/// Decode `body`, an answer with HTTP `status` to `endpoint`, as the client does when it
/// speaks v0.0.42 (the version of the recorded fixtures in `tests/fixtures/`).
pub fn decode(endpoint: Endpoint, status: u16, body: &[u8]) -> Result<Decoded, SlurmError> {
    decode_as(ApiVersion::V0_0_42, endpoint, status, body)
}

/// [`decode`] as the client does when it speaks `version`.
pub fn decode_as(
    version: ApiVersion,
    endpoint: Endpoint,
    status: u16,
    body: &[u8],
) -> Result<Decoded, SlurmError> {
    Dialect::decode(version, endpoint, status, body)
}
