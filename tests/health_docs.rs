//! The health checks `docs/health.md` ships (Argo CD's Lua, Flux's CEL) name only conditions the
//! operator sets, and there is one Argo CD check per kind. No Lua runtime: the scripts are kept
//! simple enough that the condition types they compare against are the whole contract.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use slurm_operator::controller::slurmjob::status as job;
use slurm_operator::crd::condition;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/health.md")).unwrap()
}

/// The Lua script of the Argo CD check for `kind`: the indented block under its key.
fn lua(doc: &str, kind: &str) -> String {
    let key = format!("resource.customizations.health.slurm.rs_{kind}: |");
    let start = doc
        .find(&key)
        .unwrap_or_else(|| panic!("no Argo CD check for {kind}"));
    doc[start + key.len()..]
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("    "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every string literal that follows `before` in `text`, up to `quote`.
fn quoted_after(text: &str, before: &str, quote: char) -> BTreeSet<String> {
    text.match_indices(before)
        .filter_map(|(at, _)| {
            let rest = &text[at + before.len()..];
            rest.split(quote).next().map(str::to_owned)
        })
        .collect()
}

#[test]
fn argo_cd_checks_name_only_conditions_the_operator_sets() {
    let doc = doc();
    let shared = [condition::READY, condition::RECONCILING, condition::STALLED];
    let kinds: [(&str, Vec<&str>); 3] = [
        (
            "SlurmJob",
            vec![
                job::READY,
                job::COMPLETE,
                job::FAILED,
                job::RECONCILING,
                job::STALLED,
            ],
        ),
        ("SlurmCluster", shared.to_vec()),
        ("SlurmNodeSet", shared.to_vec()),
    ];
    for crd in slurm_operator::crd::all() {
        let kind = crd.spec.names.kind;
        assert!(
            kinds.iter().any(|(k, _)| *k == kind),
            "docs/health.md has no Argo CD check for {kind}"
        );
    }
    for (kind, set) in kinds {
        let script = lua(&doc, kind);
        let used = quoted_after(&script, "find(\"", '"');
        assert!(!used.is_empty(), "{kind}: {script}");
        for type_ in &used {
            assert!(
                set.contains(&type_.as_str()),
                "{kind}'s check reads condition {type_:?}, which the operator does not set on it"
            );
        }
        // Argo CD's health statuses.
        for status in quoted_after(&script, "status = \"", '"') {
            assert!(
                ["Healthy", "Progressing", "Degraded"].contains(&status.as_str()),
                "{kind}: {status}"
            );
        }
    }
}

#[test]
fn flux_expressions_name_only_slurmjob_conditions() {
    let doc = doc();
    let used = quoted_after(&doc, "c.type == '", '\'');
    assert!(!used.is_empty());
    for type_ in used {
        assert!(
            [job::COMPLETE, job::FAILED, job::STALLED].contains(&type_.as_str()),
            "{type_}"
        );
    }
}
