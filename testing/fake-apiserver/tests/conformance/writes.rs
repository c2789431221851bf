//! Replace with a resourceVersion precondition, JSON patches with `test`, merge patches.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

async fn config_map(client: &kube::Client) -> (Api<ConfigMap>, ConfigMap) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}))
            .unwrap();
    let cm = api.create(&PostParams::default(), &cm).await.unwrap();
    (api, cm)
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_409_conflict() {
    let (_api, client) = server().await;
    let (api, original) = config_map(&client).await;
    let mut first = original.clone();
    first
        .data
        .as_mut()
        .unwrap()
        .insert("a".into(), "first".into());
    let replaced = api
        .replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    assert!(rv(&replaced) > rv(&original));
    // A second writer that read before the first wrote.
    let mut second = original.clone();
    second
        .data
        .as_mut()
        .unwrap()
        .insert("a".into(), "second".into());
    let stale = api.replace("c", &PostParams::default(), &second).await;
    assert_eq!(api_error(stale), (409, "Conflict".into()));
    assert_eq!(
        api.get("c").await.unwrap().data.unwrap()["a"],
        "first",
        "the loser wrote nothing"
    );
    // With the current resourceVersion it goes through.
    second.metadata.resource_version = replaced.metadata.resource_version.clone();
    let won = api
        .replace("c", &PostParams::default(), &second)
        .await
        .unwrap();
    assert_eq!(won.data.unwrap()["a"], "second");
    // A merge patch that names a resourceVersion is held to it too.
    let patch = json!({"metadata": {"resourceVersion": replaced.metadata.resource_version}, "data": {"b": "x"}});
    let stale = api
        .patch("c", &PatchParams::default(), &Patch::Merge(patch))
        .await;
    assert_eq!(api_error(stale), (409, "Conflict".into()));
    // Replacing what is not there: 404.
    let mut missing = original.clone();
    missing.metadata.name = Some("missing".into());
    assert_eq!(
        api_error(
            api.replace("missing", &PostParams::default(), &missing)
                .await
        )
        .0,
        404
    );
}

#[tokio::test]
async fn json_patch_applies_all_or_nothing_with_test() {
    let (_api, client) = server().await;
    let (api, original) = config_map(&client).await;
    let pp = PatchParams::default();
    let patch = |ops: serde_json::Value| Patch::<()>::Json(serde_json::from_value(ops).unwrap());
    let ok = api
        .patch(
            "c",
            &pp,
            &patch(json!([
                {"op": "test", "path": "/data/a", "value": "1"},
                {"op": "replace", "path": "/data/a", "value": "one"},
                {"op": "remove", "path": "/data/b"},
                {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
            ])),
        )
        .await
        .unwrap();
    assert_eq!(
        ok.data.clone().unwrap(),
        [("a".to_owned(), "one".to_owned())].into()
    );
    assert_eq!(ok.metadata.labels.clone().unwrap()["l"], "v");
    assert!(rv(&ok) > rv(&original));
    // A failed `test`: 422, and nothing of the patch is applied.
    let failed = api
        .patch(
            "c",
            &pp,
            &patch(json!([
                {"op": "replace", "path": "/data/a", "value": "two"},
                {"op": "test", "path": "/data/a", "value": "1"},
            ])),
        )
        .await;
    assert_eq!(api_error(failed), (422, "Invalid".into()));
    let after = api.get("c").await.unwrap();
    assert_eq!(after.data.unwrap()["a"], "one");
    assert_eq!(
        after.metadata.resource_version,
        ok.metadata.resource_version
    );
    // As the real server (evanphx/json-patch): `test` of a missing path against null passes.
    api.patch(
        "c",
        &pp,
        &patch(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ])),
    )
    .await
    .unwrap();
    // But not against a value.
    let failed = api
        .patch(
            "c",
            &pp,
            &patch(json!([{"op": "test", "path": "/metadata/annotations", "value": {}}])),
        )
        .await;
    assert_eq!(api_error(failed).0, 422);
}

/// A merge patch naming the object's uid applies; one naming another uid (meant for an object
/// deleted and re-created under the name meanwhile) is refused: the uid is immutable.
#[tokio::test]
async fn a_patch_naming_another_uid_is_refused() {
    let (_api, client) = server().await;
    let (api, cm) = config_map(&client).await;
    let own = cm.metadata.uid.clone().unwrap();
    let patch = |uid: &str| json!({"metadata": {"uid": uid, "annotations": {"x": "y"}}});
    let refused = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(patch("00000000-0000-0000-0000-000000000000")),
        )
        .await;
    assert_eq!(api_error(refused).0, 422);
    assert_eq!(api.get("c").await.unwrap().metadata.annotations, None);
    let applied = api
        .patch("c", &PatchParams::default(), &Patch::Merge(patch(&own)))
        .await
        .unwrap();
    assert_eq!(applied.metadata.uid.as_deref(), Some(own.as_str()));
    assert_eq!(applied.metadata.annotations.unwrap()["x"], "y");
}

#[tokio::test]
async fn merge_patch_merges_maps_and_null_removes() {
    let (_api, client) = server().await;
    let (api, _) = config_map(&client).await;
    let patched = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"l": "v"}},
                "data": {"a": null, "c": "3"},
            })),
        )
        .await
        .unwrap();
    let data = patched.data.unwrap();
    assert_eq!(
        data,
        [
            ("b".to_owned(), "2".to_owned()),
            ("c".to_owned(), "3".to_owned())
        ]
        .into()
    );
    assert_eq!(patched.metadata.labels.unwrap()["l"], "v");
    // Strategic merge patches are served as merge patches.
    let strategic = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"d": "4"}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.data.unwrap().len(), 3);
    // The server's fields are not a client's to patch (the uid: `a_patch_naming_another_uid_is_refused`).
    let renamed = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"name": "other"}})),
        )
        .await
        .unwrap();
    assert_eq!(renamed.metadata.name.as_deref(), Some("c"));
}

/// A strategic merge patch merges the lists Kubernetes tags `patchStrategy: merge` by their key
/// (a Pod's conditions by `type`: the others stay, and a field the patch leaves out keeps its
/// value), replaces the others; a custom resource refuses one (415).
#[tokio::test]
async fn a_strategic_merge_patch_merges_keyed_lists_and_a_custom_resource_refuses_it() {
    let (_api, client) = server().await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pp = PatchParams::default();
    let conditions = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "Mine", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z"},
    ]}});
    pods.patch_status("p", &pp, &Patch::Merge(&conditions))
        .await
        .unwrap();
    let patch = json!({"status": {"conditions": [{"type": "Mine", "status": "True"}]}});
    let patched = pods
        .patch_status("p", &pp, &Patch::Strategic(&patch))
        .await
        .unwrap();
    let got: Vec<(String, String, Option<String>)> = patched
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.type_,
                c.status,
                c.last_transition_time.map(|t| t.0.to_string()),
            )
        })
        .collect();
    let then = Some("2024-01-01T00:00:00Z".to_owned());
    assert_eq!(
        got,
        [
            ("Ready".to_owned(), "True".to_owned(), then.clone()),
            ("Mine".to_owned(), "True".to_owned(), then),
        ]
    );
    // The same patch as a merge patch replaces the list.
    let merged = pods
        .patch_status("p", &pp, &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(merged.status.unwrap().conditions.unwrap().len(), 1);

    create_widget(&client, "w", json!({})).await;
    let refused = widgets(&client)
        .patch("w", &pp, &Patch::Strategic(&json!({"spec": {"size": 2}})))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 415),
        "{refused:?}"
    );
}
