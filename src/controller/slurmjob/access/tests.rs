use serde_json::json;

use super::*;

fn cluster(access: serde_json::Value) -> SlurmCluster {
    serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "main"},
        "spec": {
            "endpoint": "https://slurmrestd.example.org:6820",
            "auth": {"jwt": {"keySecretRef": {"name": "jwt"}}},
            "access": access,
        },
    }))
    .unwrap()
}

fn spec(fields: serde_json::Value) -> SlurmJobSpec {
    let mut spec = json!({"clusterName": "main", "script": "#!/bin/sh\ntrue\n"});
    if let (Some(spec), Some(fields)) = (spec.as_object_mut(), fields.as_object()) {
        spec.extend(fields.clone());
    }
    serde_json::from_value(spec).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn grant(user: &str, account: Option<&str>, partition: Option<&str>, qos: Option<&str>) -> Grant {
    Grant {
        slurm_user: user.to_owned(),
        account: account.map(str::to_owned),
        partition: partition.map(str::to_owned),
        qos: qos.map(str::to_owned),
    }
}

/// What a row says: the case, the namespace, its labels, the spec, the grant or refusal reason.
type Row = (
    &'static str,
    &'static str,
    BTreeMap<String, String>,
    SlurmJobSpec,
    Result<Grant, &'static str>,
);

#[test]
fn who_a_slurmjob_runs_as() {
    let teams = cluster(json!([
        {"namespaces": ["team-a"], "slurmUser": "alice", "accounts": ["team-a"],
         "qos": ["normal", "tenant-low"]},
        {"namespaces": ["team-b"], "slurmUser": "bob", "partitions": ["debug", "long"]},
        {"namespaceSelector": {"matchLabels": {"hpc.example.org/team": "c"}}, "slurmUser": "carol"},
        {"namespaceSelector": {"matchExpressions": [
            {"key": "hpc.example.org/tier", "operator": "In", "values": ["gold"]}]},
         "slurmUser": "gold"},
    ]));
    let none = labels(&[]);
    let rows: Vec<Row> = vec![
        (
            "by name, with the first granted account and QoS as defaults",
            "team-a",
            none.clone(),
            spec(json!({})),
            Ok(grant("alice", Some("team-a"), None, Some("normal"))),
        ),
        (
            "a granted QoS that is not the first",
            "team-a",
            none.clone(),
            spec(json!({"qos": "tenant-low"})),
            Ok(grant("alice", Some("team-a"), None, Some("tenant-low"))),
        ),
        (
            "an account outside the grant",
            "team-a",
            none.clone(),
            spec(json!({"account": "team-b"})),
            Err("AccountNotGranted"),
        ),
        (
            "a QoS outside the grant",
            "team-a",
            none.clone(),
            spec(json!({"qos": "high"})),
            Err("QOSNotGranted"),
        ),
        (
            "nothing listed: whatever the spec asks, Slurm decides",
            "team-b",
            none.clone(),
            spec(json!({"account": "any", "qos": "any"})),
            Ok(grant("bob", Some("any"), Some("debug"), Some("any"))),
        ),
        (
            "a partition outside the grant",
            "team-b",
            none.clone(),
            spec(json!({"partition": "gpu"})),
            Err("PartitionNotGranted"),
        ),
        (
            "a list of granted partitions: Slurm picks one",
            "team-b",
            none.clone(),
            spec(json!({"partition": "long,debug"})),
            Ok(grant("bob", None, Some("long,debug"), None)),
        ),
        (
            "a list with a partition outside the grant",
            "team-b",
            none.clone(),
            spec(json!({"partition": "debug,gpu"})),
            Err("PartitionNotGranted"),
        ),
        (
            "a list with an empty part",
            "team-b",
            none.clone(),
            spec(json!({"partition": "debug,"})),
            Err("PartitionNotGranted"),
        ),
        (
            "by label",
            "research-c",
            labels(&[("hpc.example.org/team", "c")]),
            spec(json!({})),
            Ok(grant("carol", None, None, None)),
        ),
        (
            "by label expression",
            "x",
            labels(&[("hpc.example.org/tier", "gold")]),
            spec(json!({})),
            Ok(grant("gold", None, None, None)),
        ),
        (
            "the first matching entry wins (a name before a label)",
            "team-a",
            labels(&[("hpc.example.org/team", "c")]),
            spec(json!({})),
            Ok(grant("alice", Some("team-a"), None, Some("normal"))),
        ),
        (
            "a namespace no entry grants",
            "team-z",
            labels(&[("hpc.example.org/team", "z")]),
            spec(json!({})),
            Err("NoAccess"),
        ),
    ];
    for (what, namespace, labels, spec, want) in rows {
        let got = check(&teams, "main", namespace, &labels, &spec, &[]);
        match (&got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, &want, "{what}"),
            (Err(refusal), Err(reason)) => {
                assert_eq!(refusal.reason, reason, "{what}: {refusal:?}");
                assert!(refusal.message.contains(namespace), "{what}: {refusal:?}");
            }
            _ => panic!("{what}: got {got:?}"),
        }
    }
}

#[test]
fn a_cluster_without_access_grants_nothing_and_says_what_to_do() {
    let closed = cluster(json!([]));
    let refusal = check(
        &closed,
        "main",
        "team-a",
        &labels(&[]),
        &spec(json!({})),
        &[],
    )
    .unwrap_err();
    assert_eq!(refusal.reason, "NoAccess");
    assert!(
        refusal
            .message
            .contains("ask the platform admin to add the namespace"),
        "{}",
        refusal.message
    );
}

#[test]
fn a_refusal_names_what_is_granted() {
    let teams = cluster(json!([
        {"namespaces": ["team-a"], "slurmUser": "alice", "accounts": ["team-a", "shared"]},
    ]));
    let refusal = check(
        &teams,
        "main",
        "team-a",
        &labels(&[]),
        &spec(json!({"account": "root"})),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        refusal.message,
        "spec.account \"root\" is not granted to namespace \"team-a\" on SlurmCluster \"main\": \
         use one of team-a, shared"
    );
}

/// An empty selector matches every namespace in Kubernetes: refused at admission, and should
/// one get past it (an older CRD), it grants nothing here.
#[test]
fn an_empty_namespace_selector_grants_nothing() {
    for empty in [
        json!({}),
        json!({"matchLabels": {}, "matchExpressions": []}),
    ] {
        let everyone = cluster(json!([{"namespaceSelector": empty, "slurmUser": "alice"}]));
        for namespace in ["kube-system", "team-a"] {
            assert_eq!(
                entry(&everyone, namespace, &labels(&[("team", "a")])),
                None,
                "{empty}: {namespace}"
            );
        }
    }
    let named = cluster(
        json!([{"namespaceSelector": {"matchLabels": {"team": "a"}}, "slurmUser": "alice"}]),
    );
    assert!(entry(&named, "team-a", &labels(&[("team", "a")])).is_some());
}

/// A requirement Kubernetes would refuse in its own selectors grants nothing: `NotIn` with no
/// values would otherwise match every namespace (kube reads it as "not in the empty set").
#[test]
fn a_selector_requirement_kubernetes_would_refuse_grants_nothing() {
    for bad in [
        json!({"key": "team", "operator": "NotIn", "values": []}),
        json!({"key": "team", "operator": "NotIn"}),
        json!({"key": "team", "operator": "In", "values": []}),
        json!({"key": "team", "operator": "Exists", "values": ["a"]}),
        json!({"key": "team", "operator": "DoesNotExist", "values": ["b"]}),
        json!({"key": "team", "operator": "Gt", "values": ["1"]}),
    ] {
        let selector = json!({"matchExpressions": [bad]});
        let access = cluster(json!([{"namespaceSelector": selector, "slurmUser": "alice"}]));
        for (namespace, with) in [("kube-system", &[][..]), ("team-a", &[("team", "a")][..])] {
            assert_eq!(
                entry(&access, namespace, &labels(with)),
                None,
                "{bad}: {namespace}"
            );
        }
    }
    for (good, namespace, with) in [
        (
            json!({"key": "team", "operator": "NotIn", "values": ["b"]}),
            "team-a",
            &[("team", "a")][..],
        ),
        (
            json!({"key": "team", "operator": "Exists"}),
            "team-a",
            &[("team", "a")][..],
        ),
        (
            json!({"key": "team", "operator": "DoesNotExist", "values": []}),
            "scratch",
            &[][..],
        ),
    ] {
        let selector = json!({"matchExpressions": [good]});
        let access = cluster(json!([{"namespaceSelector": selector, "slurmUser": "alice"}]));
        assert!(entry(&access, namespace, &labels(with)).is_some(), "{good}");
    }
}

/// The user the operator acts as is a Slurm administrator: a namespace runs as it only where
/// its entry says so, whether the spec names it (`auth.jwt.user`) or the credentials do (a
/// ready token's user); any other user is not affected.
#[test]
fn the_clusters_own_user_is_granted_only_on_purpose() {
    let teams = cluster(json!([
        {"namespaces": ["team-a"], "slurmUser": "slurm"},
        {"namespaces": ["ops"], "slurmUser": "slurm", "allowClusterUser": true},
        {"namespaces": ["team-b"], "slurmUser": "bob"},
    ]));
    let ask = |namespace: &str, own: Option<&str>| {
        check(
            &teams,
            "main",
            namespace,
            &labels(&[]),
            &spec(json!({})),
            &own.into_iter().collect::<Vec<_>>(),
        )
    };
    let refusal = ask("team-a", Some("slurm")).unwrap_err();
    assert_eq!(refusal.reason, "ClusterUserNotAllowed");
    for says in [
        "namespace \"team-a\"",
        "Slurm user \"slurm\"",
        "map the namespace to an unprivileged Slurm user",
        "allowClusterUser: true",
    ] {
        assert!(
            refusal.message.contains(says),
            "{says}: {}",
            refusal.message
        );
    }
    assert_eq!(
        ask("ops", Some("slurm")),
        Ok(grant("slurm", None, None, None))
    );
    assert_eq!(
        ask("team-b", Some("slurm")),
        Ok(grant("bob", None, None, None))
    );
    // Another user acting for the cluster (a ready token's), or none known yet.
    assert_eq!(
        ask("team-a", Some("admin")),
        Ok(grant("slurm", None, None, None))
    );
    assert_eq!(ask("team-a", None), Ok(grant("slurm", None, None, None)));
    assert_eq!(
        ask("team-b", Some("bob")).unwrap_err().reason,
        "ClusterUserNotAllowed"
    );
    // Every user named counts.
    let both = check(
        &teams,
        "main",
        "team-a",
        &labels(&[]),
        &spec(json!({})),
        &["ops", "slurm"],
    );
    assert_eq!(both.unwrap_err().reason, "ClusterUserNotAllowed");
}
