//! Server-side apply: field managers, conflicts, removal of fields no longer applied,
//! `managedFields`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::*;

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
}

async fn apply(
    api: &Api<ConfigMap>,
    manager: &str,
    object: Value,
    force: bool,
) -> kube::Result<ConfigMap> {
    let mut pp = PatchParams::apply(manager);
    if force {
        pp = pp.force();
    }
    api.patch("c", &pp, &Patch::Apply(object)).await
}

#[tokio::test]
async fn a_field_owned_by_another_manager_is_a_conflict_unless_forced() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let created = apply(&api, "a", cm(json!({"x": "1"})), false)
        .await
        .unwrap();
    assert_eq!(owned(&created, "a", "Apply"), ["data.x"]);
    // Another value: 409, nothing written.
    let conflict = apply(&api, "b", cm(json!({"x": "2"})), false).await;
    assert_eq!(api_error(conflict), (409, "Conflict".into()));
    let current = api.get("c").await.unwrap();
    assert_eq!(current.data.clone().unwrap()["x"], "1");
    assert_eq!(
        current.metadata.resource_version,
        created.metadata.resource_version
    );
    // The same value: no conflict; both own it.
    let shared = apply(&api, "b", cm(json!({"x": "1"})), false)
        .await
        .unwrap();
    assert_eq!(owned(&shared, "a", "Apply"), ["data.x"]);
    assert_eq!(owned(&shared, "b", "Apply"), ["data.x"]);
    // Forced: the value changes and the other manager loses the field.
    apply(&api, "c", cm(json!({"x": "1"})), false)
        .await
        .unwrap();
    let forced = apply(&api, "b", cm(json!({"x": "3"})), true).await.unwrap();
    assert_eq!(forced.data.clone().unwrap()["x"], "3");
    assert_eq!(owned(&forced, "b", "Apply"), ["data.x"]);
    assert!(
        owned(&forced, "a", "Apply").is_empty(),
        "{:?}",
        forced.metadata.managed_fields
    );
    assert!(owned(&forced, "c", "Apply").is_empty());
    // A field last written by an update belongs to that manager: a conflict for appliers too.
    api.patch(
        "c",
        &updater("editor"),
        &Patch::Merge(json!({"data": {"x": "4"}})),
    )
    .await
    .unwrap();
    let conflict = apply(&api, "b", cm(json!({"x": "3"})), false).await;
    assert_eq!(api_error(conflict).0, 409);
}

#[tokio::test]
async fn a_field_a_manager_stops_applying_is_removed_unless_another_owns_it() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut labelled = cm(json!({"x": "1", "y": "2"}));
    labelled["metadata"]["labels"] = json!({"app.kubernetes.io/name": "n", "keep": "k"});
    apply(&api, "a", labelled, false).await.unwrap();
    let mut fewer = cm(json!({"x": "1"}));
    fewer["metadata"]["labels"] = json!({"keep": "k"});
    let applied = apply(&api, "a", fewer, false).await.unwrap();
    assert_eq!(
        applied.data.clone().unwrap(),
        [("x".to_owned(), "1".to_owned())].into()
    );
    assert_eq!(
        applied.metadata.labels.clone().unwrap(),
        [("keep".to_owned(), "k".to_owned())].into(),
        "a label with dots in its name goes too"
    );
    // Shared: b applies what a applies; a stops; the field stays (b's); b stops: gone.
    apply(&api, "b", cm(json!({"x": "1"})), false)
        .await
        .unwrap();
    let kept = apply(&api, "a", cm(json!({})), false).await.unwrap();
    assert_eq!(kept.data.clone().unwrap()["x"], "1");
    assert_eq!(owned(&kept, "b", "Apply"), ["data.x"]);
    let gone = apply(&api, "b", cm(json!({})), false).await.unwrap();
    assert!(gone.data.unwrap_or_default().is_empty());
    // What an update wrote stays when an applier stops applying the field.
    apply(&api, "a", cm(json!({"z": "1"})), false)
        .await
        .unwrap();
    api.patch(
        "c",
        &updater("editor"),
        &Patch::Merge(json!({"data": {"z": "2"}})),
    )
    .await
    .unwrap();
    let stays = apply(&api, "a", cm(json!({})), false).await.unwrap();
    assert_eq!(stays.data.unwrap()["z"], "2");
}

#[tokio::test]
async fn managed_fields_record_every_manager_and_operation() {
    let (_api, client) = server().await;
    let w = widgets(&client);
    let created = w
        .patch("w", &PatchParams::apply("applier"), &Patch::Apply(json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"l": "v"}},
            "spec": {"size": 1, "color": "red"},
        })))
        .await
        .unwrap();
    assert_eq!(
        owned(&created, "applier", "Apply"),
        ["metadata.labels.l", "spec.color", "spec.size"]
    );
    let entry = &created.metadata.managed_fields.as_ref().unwrap()[0];
    assert_eq!(entry.api_version.as_deref(), Some("example.com/v1"));
    assert_eq!(entry.fields_type.as_deref(), Some("FieldsV1"));
    assert!(entry.time.is_some());
    let updated = w
        .patch(
            "w",
            &updater("editor"),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        owned(&updated, "applier", "Apply"),
        ["metadata.labels.l", "spec.color"]
    );
    assert_eq!(owned(&updated, "editor", "Update"), ["spec.size"]);
    let status = w
        .patch_status("w", &PatchParams::apply("reporter"), &Patch::Apply(json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"ready": true},
        })))
        .await
        .unwrap();
    let entries = status.metadata.managed_fields.clone().unwrap();
    let reporter = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("reporter"))
        .unwrap();
    assert_eq!(reporter.subresource.as_deref(), Some("status"));
    assert_eq!(owned(&status, "reporter", "Apply"), ["status.ready"]);
    assert_eq!(entries.len(), 3);
    // Raw: the wire format the real server writes.
    let raw = raw(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets/w",
        &[],
        None,
    )
    .await
    .unwrap();
    let fields = raw["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "applier")
        .unwrap()["fieldsV1"]
        .clone();
    assert_eq!(
        fields,
        json!({"f:metadata": {"f:labels": {"f:l": {}}}, "f:spec": {"f:color": {}}})
    );
}

#[tokio::test]
async fn apply_creates_a_missing_object() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let object = cm(json!({"x": "1"}));
    let raw_created = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c?fieldManager=a",
        &[("Content-Type", "application/apply-patch+yaml")],
        Some(object.clone()),
    )
    .await
    .unwrap();
    assert_eq!(raw_created["data"]["x"], "1");
    assert!(raw_created["metadata"]["uid"].is_string());
    let got = api.get("c").await.unwrap();
    assert_eq!(owned(&got, "a", "Apply"), ["data.x"]);
    // Applying the same again changes nothing, not even the resourceVersion.
    let again = apply(&api, "a", object, false).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        got.metadata.resource_version
    );
}
