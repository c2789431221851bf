//! REST API v0.0.44: `shared.rs` as it is (v0.0.42 is the shape the others are named after).

use crate::slurm::generated::v0_0_44::Client;
use crate::slurm::generated::v0_0_44::types as api;

const VERSION: ApiVersion = ApiVersion::V0_0_44;

include!("shared.rs");

crate::slurm::dialect::responding_by_flag!();

crate::slurm::dialect::cancel_by_status!();
crate::slurm::dialect::accounting_output_files!();
