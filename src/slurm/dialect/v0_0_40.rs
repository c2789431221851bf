//! REST API v0.0.40 (Slurm 23.11 to 24.11). Differs from v0.0.42 in: `/ping` says `pinged`
//! and `mode` (no `responding`/`primary`), `DELETE /job` answers a plain `openapi_resp`, and
//! slurmdbd's job records do not name the output files.

use crate::slurm::generated::v0_0_40::Client;
use crate::slurm::generated::v0_0_40::types as api;

const VERSION: ApiVersion = ApiVersion::V0_0_40;

include!("shared.rs");

crate::slurm::dialect::responding_by_pinged!();

crate::slurm::dialect::cancel_by_errors!();

/// Not in this version's records: the output stays unknown to accounting lookups.
fn accounting_output(_: &api::Job) -> (Option<String>, Option<String>) {
    (None, None)
}
