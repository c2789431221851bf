//! Who a dynamic Slurm node belongs to: the SlurmNodeSet (namespace and name) whose pod
//! registered it.
//!
//! The record lives in Slurm itself, in the node's `extra` field, so it survives an operator
//! restart: the operator starts each pod's slurmd with `--extra '{"slurm.rs/nodeset":"<ns>/<name>"}'`
//! and slurmctld stores it with the node at registration, before the node can run anything.
//! Facts relied on (Slurm 24.11.5 and 26.05.5, checked on the local Slurm): `slurmd -h` of both
//! lists `--extra`; the string comes back verbatim as `extra` from `GET /slurm/v0.0.42/nodes`; a
//! slurmd restarted without `--extra` keeps the stored value; one restarted with another value
//! replaces it on 24.11.5, while 26.05.5 keeps the first value until the node is deleted; a
//! non-admin Slurm user (`alice`) cannot change it (`POST /node/{name}`, v0.0.42 and v0.0.44,
//! and `scontrol update extra=` fail with 2010 "Invalid user id"), so only Slurm admins and
//! holders of the cluster's `slurm.key` (slurmd registration) can write it. slurmctld keeps
//! `extra` in its saved node state (`_dump_node_state` in `src/slurmctld/node_mgr.c`). JSON,
//! because with `SchedulerParameters=extra_constraints` Slurm reads `extra` as a JSON object.
//!
//! The facade parses the record once, where node records are converted ([`Node::owner`]).
//!
//! [`Node::owner`]: super::types::Node::owner

use std::fmt;

/// The key of the owner record in a node's `extra` JSON object.
pub const EXTRA_KEY: &str = "slurm.rs/nodeset";

/// The SlurmNodeSet a dynamic node belongs to.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct NodeOwner {
    namespace: String,
    name: String,
}

impl NodeOwner {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `extra` text slurmd registers the node with.
    pub fn to_extra(&self) -> String {
        serde_json::json!({ EXTRA_KEY: self.to_string() }).to_string()
    }

    /// The owner a node's `extra` records, if it is a JSON object whose [`EXTRA_KEY`] holds
    /// `<namespace>/<name>` (other keys are the admin's and are ignored).
    pub fn from_extra(extra: &str) -> Option<Self> {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(extra).ok()?;
        let (namespace, name) = object.get(EXTRA_KEY)?.as_str()?.split_once('/')?;
        let valid = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        };
        (valid(namespace, 63) && valid(name, 253)).then(|| Self::new(namespace, name))
    }
}

impl fmt::Display for NodeOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_through_extra() {
        let owner = NodeOwner::new("team-a", "cpu");
        assert_eq!(owner.to_extra(), r#"{"slurm.rs/nodeset":"team-a/cpu"}"#);
        assert_eq!(NodeOwner::from_extra(&owner.to_extra()), Some(owner));
    }

    #[test]
    fn only_a_well_formed_record_is_an_owner() {
        let cases = [
            // Whitespace and other keys (an admin's) do not matter.
            (
                r#" { "zone": "a", "slurm.rs/nodeset" : "ns/set.v2" } "#,
                Some(("ns", "set.v2")),
            ),
            ("", None),
            ("team-a/cpu", None),
            (r#"{"slurm.rs/nodeset":"cpu"}"#, None),
            (r#"{"slurm.rs/nodeset":"/cpu"}"#, None),
            (r#"{"slurm.rs/nodeset":"team-a/"}"#, None),
            (r#"{"slurm.rs/nodeset":"team-a/cpu/x"}"#, None),
            (r#"{"slurm.rs/nodeset":"Team-A/cpu"}"#, None),
            (r#"{"slurm.rs/nodeset":7}"#, None),
            (r#"{"slurm.rs/nodesets":"team-a/cpu"}"#, None),
            (r#"["slurm.rs/nodeset","team-a/cpu"]"#, None),
        ];
        for (extra, want) in cases {
            assert_eq!(
                NodeOwner::from_extra(extra),
                want.map(|(ns, n)| NodeOwner::new(ns, n)),
                "{extra:?}"
            );
        }
    }
}
