//! The Slurm jobs this process submitted, by tag: the SlurmJob controller's own state.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::slurm::tag::OwnerTag;

/// Jobs this process submitted, by tag: covers the time between a submit and the next index
/// sync, when neither the status (not written yet) nor the index knows the job.
#[derive(Debug, Default)]
pub struct Submissions {
    by_tag: Mutex<HashMap<OwnerTag, u32>>,
}

impl Submissions {
    pub fn get(&self, tag: &OwnerTag) -> Option<u32> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.get(tag).copied()
    }

    pub fn record(&self, tag: &OwnerTag, job_id: u32) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(tag.clone(), job_id);
    }

    /// Forget the tags of `uid` (the SlurmJob is gone).
    pub fn forget_uid(&self, uid: &str) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|t, _| !t.is_of(uid));
    }

    pub fn len(&self) -> usize {
        self.by_tag.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
