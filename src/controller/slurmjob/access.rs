//! Who a SlurmJob runs as: the access entry of its SlurmCluster that grants the SlurmJob's
//! namespace, and whether the account, partition and QoS it asks for are within that grant.
//! Pure: the SlurmCluster and the namespace's labels are read by the caller.
//!
//! A namespace no entry grants gets no submit at all; the cluster's own user (the one the
//! operator polls as, a Slurm administrator) is never used for a tenant's job unless an entry
//! names it and says so (`allowClusterUser`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::core::{Selector, SelectorExt};

use crate::crd::slurmjob::SlurmJobSpec;
use crate::crd::{ClusterAccess, SlurmCluster};

/// Why a SlurmJob may not be submitted to its SlurmCluster: a stable reason for its `Ready`
/// condition and a message that says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// The first entry of `cluster.spec.access` that grants `namespace` (by name, or by its
/// `labels` through the entry's selector).
pub fn entry<'a>(
    cluster: &'a SlurmCluster,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Option<&'a ClusterAccess> {
    cluster.spec.access.iter().find(|access| {
        access.namespaces.iter().any(|n| n == namespace)
            || access.namespace_selector.as_ref().is_some_and(|selector| {
                // A selector the API server would not have accepted grants nothing, nor does an
                // empty one (refused at admission: it would match every namespace).
                let empty = selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
                    && selector
                        .match_expressions
                        .as_ref()
                        .is_none_or(|e| e.is_empty());
                let valid = selector
                    .match_expressions
                    .iter()
                    .flatten()
                    .all(valid_requirement);
                !empty
                    && valid
                    && Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
            })
    })
}

/// A selector requirement as Kubernetes validates one for its own selectors: `In`/`NotIn` with
/// values, `Exists`/`DoesNotExist` without. The schema cannot hold this for a SlurmCluster (the
/// list is unbounded, so a rule over it is priced too high), and kube's `Selector` reads
/// `NotIn` with no values as matching every namespace.
fn valid_requirement(requirement: &LabelSelectorRequirement) -> bool {
    let values = requirement.values.as_ref().map_or(0, Vec::len);
    match requirement.operator.as_str() {
        "In" | "NotIn" => values > 0,
        "Exists" | "DoesNotExist" => values == 0,
        _ => false,
    }
}

/// What a SlurmJob runs under: the Slurm user, and the account, partition and QoS to submit
/// with (what the spec asks for, else the first one the entry grants, else Slurm's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub slurm_user: String,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
}

/// The grant a SlurmJob in `namespace` (with `labels`) runs under, or why it has none.
/// `own_users` are the users the operator acts as on this cluster (`auth.jwt.user`, or a ready
/// token's user), as far as known.
pub fn check(
    cluster: &SlurmCluster,
    cluster_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    spec: &SlurmJobSpec,
    own_users: &[&str],
) -> Result<Grant, Refusal> {
    let Some(access) = entry(cluster, namespace, labels) else {
        return Err(Refusal {
            reason: "NoAccess",
            message: format!(
                "namespace {namespace:?} may not use SlurmCluster {cluster_name:?}: no entry of \
                 its spec.access grants it; ask the platform admin to add the namespace there"
            ),
        });
    };
    // Admission refuses such an entry for `auth.jwt.user`; this holds for one stored before
    // the rule, and for a ready token's user, which only the credentials tell.
    if own_users.contains(&access.slurm_user.as_str()) && !access.allow_cluster_user {
        return Err(Refusal {
            reason: "ClusterUserNotAllowed",
            message: format!(
                "namespace {namespace:?} is granted SlurmCluster {cluster_name:?} as Slurm user \
                 {:?}, the user the operator itself acts as there (a Slurm administrator): its \
                 jobs could cancel any job and drain any node; ask the platform admin to map the \
                 namespace to an unprivileged Slurm user (or, for a cluster one team owns, to \
                 set allowClusterUser: true on its access entry)",
                access.slurm_user
            ),
        });
    }
    // `list`: the field may be a comma-separated list (partitions: Slurm picks one), each of
    // which must be granted.
    let pick = |reason: &'static str,
                field: &str,
                asked: Option<&String>,
                granted: &[String],
                list: bool| {
        let is_granted = |asked: &String| {
            granted.is_empty()
                || granted.contains(asked)
                || (list && asked.split(',').all(|p| granted.iter().any(|g| g == p)))
        };
        match asked {
            Some(asked) if !is_granted(asked) => Err(Refusal {
                reason,
                message: format!(
                    "{field} {asked:?} is not granted to namespace {namespace:?} on SlurmCluster \
                     {cluster_name:?}: use one of {}",
                    granted.join(", ")
                ),
            }),
            Some(asked) => Ok(Some(asked.clone())),
            None => Ok(granted.first().cloned()),
        }
    };
    Ok(Grant {
        slurm_user: access.slurm_user.clone(),
        account: pick(
            "AccountNotGranted",
            "spec.account",
            spec.account.as_ref(),
            &access.accounts,
            false,
        )?,
        partition: pick(
            "PartitionNotGranted",
            "spec.partition",
            spec.partition.as_ref(),
            &access.partitions,
            true,
        )?,
        qos: pick(
            "QOSNotGranted",
            "spec.qos",
            spec.qos.as_ref(),
            &access.qos,
            false,
        )?,
    })
}

#[cfg(test)]
mod tests;
