//! Which Slurm cluster a client's answers must come from, and whether its writes may go out.

use super::error::SlurmError;

/// The Slurm cluster (`ClusterName`) a client was confirmed to reach, shared by its clones.
///
/// Once one is expected, an answer rendered for another (`meta.slurm.cluster`), error answers
/// included, is refused ([`SlurmError::OtherCluster`]): job ids and node names mean something
/// only in their own cluster, and an endpoint re-pointed at another cluster's slurmrestd (a
/// DNS name moved) would otherwise feed that cluster's jobs and nodes to the index, and its
/// refusals to the SlurmJobs, until the SlurmCluster's next check. And from that answer on,
/// no write leaves the client (a cancel there would reach another cluster's job of that id)
/// until the cluster is confirmed again ([`Self::expect`]).
#[derive(Debug, Default)]
pub(crate) struct Identity(std::sync::Mutex<IdentityState>);

#[derive(Debug, Default)]
struct IdentityState {
    expected: Option<std::sync::Arc<str>>,
    /// Another cluster an answer came from since `expected` was set (the latest).
    other: Option<String>,
    /// Answers of more than one other cluster came since (`other` names only the latest).
    others: bool,
    /// How many answers were refused so far ([`Identity::epoch`]).
    refusals: u64,
}

impl Identity {
    fn state(&self) -> std::sync::MutexGuard<'_, IdentityState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Answers must come from `name` from now on (empty: from any). Held writes go out again
    /// when `since` (an [`Self::epoch`] read before the answer that showed `name`) shows no
    /// answer refused after it, or when every answer refused came from `name` itself; without
    /// `since`, only then: a word not known to be the latest releases nothing.
    pub(crate) fn expect(&self, name: &str, since: Option<u64>) {
        let mut state = self.state();
        let current = since.is_some_and(|epoch| state.refusals == epoch);
        let only_from_name = !state.others && state.other.as_deref() == Some(name);
        if current || only_from_name {
            state.other = None;
            state.others = false;
        }
        state.expected = (!name.is_empty()).then(|| std::sync::Arc::from(name));
    }

    /// A count of the answers refused so far: read before asking whom the endpoint serves,
    /// given to [`Self::expect`] with what it answered.
    pub(crate) fn epoch(&self) -> u64 {
        self.state().refusals
    }

    /// Whether writes are held ([`SlurmError::WritesHeld`]).
    pub(crate) fn writes_held(&self) -> bool {
        let state = self.state();
        state.expected.is_some() && state.other.is_some()
    }

    pub(crate) fn expected(&self) -> Option<std::sync::Arc<str>> {
        self.state().expected.clone()
    }

    /// An answer to `operation` rendered for `served`: refused when another cluster than the
    /// one expected. `made`: the job a submit's answer says it made (there, not followed).
    pub(super) fn judge(
        &self,
        operation: &'static str,
        served: Option<String>,
        made: Option<u32>,
    ) -> Result<(), SlurmError> {
        let mut state = self.state();
        let (Some(expected), Some(served)) = (state.expected.clone(), served) else {
            return Ok(());
        };
        if *expected == *served {
            return Ok(());
        }
        if let Some(job_id) = made {
            tracing::warn!(
                job_id,
                expected = %expected,
                served,
                "a submit was answered by another Slurm cluster: the job it made there is not \
                 followed"
            );
        }
        if state.other.as_ref().is_some_and(|other| *other != served) {
            state.others = true;
        }
        state.other = Some(served.clone());
        state.refusals += 1;
        Err(SlurmError::OtherCluster {
            operation,
            expected: expected.to_string(),
            served,
        })
    }

    /// Refuses a write while an answer of another cluster has come since the last
    /// confirmation.
    pub(super) fn may_write(&self, operation: &'static str) -> Result<(), SlurmError> {
        let state = self.state();
        match (&state.expected, &state.other) {
            (Some(expected), Some(other)) => Err(SlurmError::WritesHeld {
                operation,
                expected: expected.to_string(),
                served: other.clone(),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes are held from an answer of another Slurm cluster than the one expected until a
    /// confirmation, and a confirmation made on what `/diag` said before a later refusal does
    /// not release them; following to the cluster that answered does.
    #[test]
    fn writes_are_held_from_another_clusters_answer_until_a_confirmation_after_it() {
        let identity = Identity::default();
        assert!(
            identity.judge("nodes", Some("z".into()), None).is_ok(),
            "none expected"
        );
        identity.expect("x", None);
        assert!(identity.may_write("cancel_job").is_ok());
        assert!(identity.judge("nodes", Some("x".into()), None).is_ok());
        assert!(
            identity.judge("nodes", None, None).is_ok(),
            "an answer that does not say"
        );
        assert!(!identity.writes_held());

        let refused = identity.judge("nodes", Some("y".into()), None);
        assert!(
            matches!(&refused, Err(SlurmError::OtherCluster { expected, served, .. })
                if expected == "x" && served == "y"),
            "{refused:?}"
        );
        let held = identity.may_write("cancel_job");
        assert!(
            matches!(&held, Err(SlurmError::WritesHeld { served, .. }) if served == "y"),
            "{held:?}"
        );
        // `/diag` said x, then y answered again: confirming x on that word keeps them held.
        let epoch = identity.epoch();
        assert!(identity.judge("nodes", Some("y".into()), None).is_err());
        identity.expect("x", Some(epoch));
        assert!(identity.writes_held());
        // Said x with nothing refused since: released.
        identity.expect("x", Some(identity.epoch()));
        assert!(!identity.writes_held());
        assert!(identity.may_write("cancel_job").is_ok());

        // Following to the cluster that answered releases them whatever came since.
        let epoch = identity.epoch();
        assert!(identity.judge("nodes", Some("y".into()), None).is_err());
        identity.expect("y", Some(epoch));
        assert!(!identity.writes_held());
        assert!(identity.judge("nodes", Some("y".into()), None).is_ok());

        // Not when a third cluster answered too (round-robin across two others).
        let epoch = identity.epoch();
        assert!(identity.judge("nodes", Some("z".into()), None).is_err());
        assert!(identity.judge("nodes", Some("x".into()), None).is_err());
        identity.expect("x", Some(epoch));
        assert!(identity.writes_held(), "z answered after the epoch");
        // And a word without an epoch releases nothing it cannot vouch for.
        identity.expect("x", None);
        assert!(identity.writes_held());
        identity.expect("x", Some(identity.epoch()));
        assert!(!identity.writes_held());
    }
}
