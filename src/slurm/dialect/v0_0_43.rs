//! REST API v0.0.43 (the reference shape: `shared.rs` as it is).

use crate::slurm::generated::v0_0_43::Client;
use crate::slurm::generated::v0_0_43::types as api;

const VERSION: ApiVersion = ApiVersion::V0_0_43;

include!("shared.rs");

/// The primary slurmctld answers (`mode` says primary where `primary` is missing).
fn controller_responding(resp: &api::OpenapiPingArrayResp) -> bool {
    resp.pings.iter().flat_map(|p| p.0.iter()).any(|p| {
        p.responding == Some(true)
            && (p.primary == Some(true) || p.mode.as_deref() == Some("primary"))
    })
}

crate::slurm::dialect::cancel_by_status!();
crate::slurm::dialect::accounting_output_files!();
