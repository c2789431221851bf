//! The preprocessing passes, one function each, in the order [`crate::preprocess`] runs them
//! (the `Step n` in each doc comment). Every pass checks the shape it fixes: one that meets a
//! spec it does not recognise returns [`crate::Error::Spec`] rather than generate something
//! subtly different, and leaves the spec as it was.

mod free_form;
mod jobs_state;
mod operations;
mod relax;
mod responses;
mod types;
mod version;

pub use free_form::drop_free_form_properties;
pub use jobs_state::{
    JOBS_STATE_ENTRY, JOBS_STATE_LIST, JOBS_STATE_PATH, JOBS_STATE_RESP, fix_jobs_state_response,
    repeat_jobs_state_job_id,
};
pub use operations::{
    KEPT_OPERATIONS, keep_used_operations, kept_operations, prune_unreachable_schemas,
};
pub use relax::{drop_defaults, drop_required, widen_int32};
pub use responses::replace_default_responses;
pub use types::{EXPECTED_RENAMES, open_enums, rename_colliding_schemas};
pub use version::{
    KEPT_PARAMETERS, SCHEMA_ALIASES, hoist_inline_schemas, keep_used_parameters, unversion,
};
