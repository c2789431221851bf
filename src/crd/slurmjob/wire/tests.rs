use kube::Resource;
use kube::core::{ObjectList, WatchEvent};
use serde_json::json;

use super::*;
use crate::crd::slurmjob::CachedSlurmJob;

/// `leaf` inside `levels` lists.
fn lists(levels: usize, leaf: Value) -> Value {
    (0..levels).fold(leaf, |inner, _| json!([inner]))
}

/// `leaf` inside `levels` objects.
fn objects(levels: usize, leaf: Value) -> Value {
    (0..levels).fold(leaf, |inner, _| json!({"a": inner}))
}

/// A SlurmJob as the API server returns it, with `extra` as its extraOptions and a managed
/// field entry whose `fieldsV1` nests `managed` objects deep (as server-side apply records a
/// map nested in extraOptions).
fn stored(name: &str, extra: Value, managed: usize) -> Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmJob",
        "metadata": {
            "name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
            "generation": 2, "resourceVersion": "7",
            "labels": {"app": "x"},
            "finalizers": ["slurm.rs/cleanup"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}],
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "slurm.rs/v1alpha1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:extraOptions": objects(managed, json!({}))}},
            }],
        },
        "spec": {
            "clusterName": "main",
            "script": "#!/bin/sh\ntrue\n",
            "extraOptions": extra,
        },
        "status": {"phase": "Pending"},
    })
}

/// `job` decoded from its text, as kube reads an answer (serde_json's `Value` decoder, unlike
/// its text decoder, has no recursion limit).
fn decode(job: &Value) -> Result<WholeSlurmJob, serde_json::Error> {
    serde_json::from_str(&job.to_string())
}

fn page(items: Vec<Value>) -> String {
    json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJobList",
        "metadata": {"resourceVersion": "9"},
        "items": items,
    })
    .to_string()
}

/// One tenant's SlurmJob nested past serde_json's 128 levels (in extraOptions, and in the
/// managedFields that records it) no longer fails the list page it is on, nor its watch events:
/// the other SlurmJobs of the page decode whole, and it decodes with the option marked, which
/// its submit refuses.
#[test]
fn a_deeply_nested_slurmjob_fails_no_page_of_the_cache() {
    let poisoned = stored("pill", json!({"argv": lists(200, json!("x"))}), 200);
    let mapped = stored("pill2", json!({"begin_time": objects(300, json!(1))}), 300);
    let sound = stored(
        "ok",
        json!({"argv": ["a", "b"], "begin_time": {"set": true, "number": 5}}),
        2,
    );
    let text = page(vec![sound.clone(), poisoned.clone(), mapped]);
    // The input is what broke the cache: SlurmJob's own decoding refuses it.
    let error = serde_json::from_str::<ObjectList<SlurmJob>>(&text).unwrap_err();
    assert!(error.to_string().contains("recursion limit"), "{error}");

    let list: ObjectList<CachedSlurmJob> = serde_json::from_str(&text).expect("the page decodes");
    let names: Vec<_> = list.items.iter().map(|j| j.meta().name.clone()).collect();
    assert_eq!(
        names,
        [Some("ok".into()), Some("pill".into()), Some("pill2".into())]
    );
    let ok = list.items[0].object().unwrap();
    assert_eq!(ok.metadata.uid.as_deref(), Some("uid-ok"));
    assert_eq!(
        ok.metadata.finalizers,
        Some(vec!["slurm.rs/cleanup".into()])
    );
    assert_eq!(ok.metadata.managed_fields, None, "skipped unread");
    assert_eq!(ok.spec.cluster_name, "main");

    for (job, key) in [
        (&poisoned, "argv"),
        (
            &stored("m", json!({"begin_time": objects(300, json!(1))}), 0),
            "begin_time",
        ),
    ] {
        // As the API server writes it: the type first (serde reads the object straight on).
        let event = format!(r#"{{"type":"MODIFIED","object":{job}}}"#);
        let WatchEvent::Modified(cached) =
            serde_json::from_str::<WatchEvent<CachedSlurmJob>>(&event).expect("the event decodes")
        else {
            panic!("not a Modified event");
        };
        assert_eq!(cached.meta().generation, Some(2));
        // Not readable as it stands (nested past serde_json's limit), whatever SlurmJob's
        // fields decode.
        assert!(serde_json::from_str::<Value>(&event).is_err());
        // The whole object, as a reconcile reads it: the option is marked, nothing else lost.
        let whole = decode(job).expect("decodes whole");
        let extra = whole.spec.extra_options.clone().unwrap();
        assert_eq!(
            extra.keys().collect::<Vec<_>>(),
            [&format!("{key}{NESTED_TOO_DEEP}")]
        );
        assert_eq!(whole.spec.script, "#!/bin/sh\ntrue\n");
        assert_eq!(whole.meta().labels.as_ref().unwrap()["app"], "x");
        assert_eq!(
            whole.meta().owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(whole.meta().managed_fields, None);
        assert!(whole.status.is_some());
    }
}

/// Options nested up to [`MAX_EXTRA_OPTION_DEPTH`] are kept as written (every JSON kind); one
/// level more is marked; a SlurmJob without extraOptions, or with `null`, has none.
#[test]
fn extra_options_are_kept_to_their_bound_and_marked_past_it() {
    let deepest = lists(MAX_EXTRA_OPTION_DEPTH, json!("x"));
    let written = json!({
        "argv": ["a", 1, -2, 2.5, true, null],
        "begin_time": {"set": true, "infinite": false, "number": 1_700_000_000_u64},
        "extra": deepest.clone(),
        "licenses": objects(MAX_EXTRA_OPTION_DEPTH, json!("y")),
        "prefer": lists(MAX_EXTRA_OPTION_DEPTH + 1, json!("x")),
        "profile": [[1], lists(MAX_EXTRA_OPTION_DEPTH, json!(2))],
    });
    let whole = decode(&stored("j", written.clone(), 1)).unwrap();
    let extra = whole.spec.extra_options.clone().unwrap();
    for key in ["argv", "begin_time", "extra", "licenses"] {
        assert_eq!(extra[key], written[key], "{key}");
    }
    assert_eq!(extra[&format!("prefer{NESTED_TOO_DEEP}")], Value::Null);
    assert!(!extra.contains_key("prefer"));
    // One element too deep marks the whole value.
    assert!(extra.contains_key(&format!("profile{NESTED_TOO_DEEP}")));
    assert_eq!(extra.len(), 6);
    // The same through SlurmJob's own decoding (the spec's field decodes this way everywhere).
    let typed: SlurmJob = serde_json::from_str(&stored("j", written, 1).to_string()).unwrap();
    assert_eq!(typed.spec.extra_options, Some(extra));

    for absent in [json!(null), json!("none")] {
        let mut job = stored("n", json!({}), 1);
        if absent.is_null() {
            job["spec"]["extraOptions"] = Value::Null;
        } else {
            job["spec"].as_object_mut().unwrap().remove("extraOptions");
        }
        assert_eq!(decode(&job).unwrap().spec.extra_options, None, "{absent}");
    }
    // What the API server never stores is still an error, not a default.
    let mut no_spec = stored("n", json!({}), 1);
    no_spec.as_object_mut().unwrap().remove("spec");
    let error = decode(&no_spec).unwrap_err();
    assert!(
        error.to_string().contains("missing field `spec`"),
        "{error}"
    );
    let error = decode(&json!({
        "metadata": {"labels": objects(6, json!("x"))}, "spec": {"clusterName": "c", "script": "s"},
    }))
    .unwrap_err();
    assert!(
        error.to_string().contains("metadata.labels nests"),
        "{error}"
    );
}

/// A whole SlurmJob writes back as the SlurmJob it wraps.
#[test]
fn a_whole_slurmjob_serializes_as_the_slurmjob() {
    let whole = decode(&stored("j", json!({"argv": ["a"]}), 1)).unwrap();
    assert_eq!(
        serde_json::to_value(&whole).unwrap(),
        serde_json::to_value(&whole.0).unwrap()
    );
    assert_eq!(WholeSlurmJob::kind(&()), "SlurmJob");
    assert_eq!(WholeSlurmJob::plural(&()), "slurmjobs");
}
