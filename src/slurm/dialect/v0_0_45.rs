//! REST API v0.0.45 (Slurm 26.05). Differs from v0.0.42 in: `/ping` no longer says `mode`.

use crate::slurm::generated::v0_0_45::Client;
use crate::slurm::generated::v0_0_45::types as api;

const VERSION: ApiVersion = ApiVersion::V0_0_45;

include!("shared.rs");

/// Any controller: a backup that took over from a primary that is down serves as well.
fn controller_responding(resp: &api::OpenapiPingArrayResp) -> bool {
    resp.pings
        .iter()
        .flat_map(|p| p.0.iter())
        .any(|p| p.responding == Some(true))
}

crate::slurm::dialect::cancel_by_status!();
crate::slurm::dialect::accounting_output_files!();
