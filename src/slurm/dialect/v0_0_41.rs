//! REST API v0.0.41 (Slurm 24.05 to 25.05). Its spec inlines nearly every schema;
//! `tools/gen-client` names them as v0.0.42 does. Differs from v0.0.42 in: `/ping` says
//! `pinged` and `mode`, and `DELETE /job` answers a plain `openapi_resp`.

use crate::slurm::generated::v0_0_41::Client;
use crate::slurm::generated::v0_0_41::types as api;

const VERSION: ApiVersion = ApiVersion::V0_0_41;

include!("shared.rs");

crate::slurm::dialect::responding_by_pinged!();

crate::slurm::dialect::cancel_by_errors!();
crate::slurm::dialect::accounting_output_files!();
