//! Status subresources: create drops the status, object writes keep it, `/status` writes change
//! only it.

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn create_drops_the_status() {
    let (_api, client) = server().await;
    let mut w = widget("w", json!({"size": 1}));
    w.data["status"] = json!({"ready": true});
    let created = widgets(&client)
        .create(&PostParams::default(), &w)
        .await
        .unwrap();
    assert!(created.data.get("status").is_none(), "{:?}", created.data);
    // An apply that creates drops it too.
    let applied = widgets(&client)
        .patch(
            "v",
            &PatchParams::apply("m"),
            &Patch::Apply(json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "v"},
                "spec": {"size": 1}, "status": {"ready": true},
            })),
        )
        .await
        .unwrap();
    assert!(applied.data.get("status").is_none());
}

#[tokio::test]
async fn writes_to_the_object_keep_its_status() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    create_widget(&client, "w", json!({"size": 1})).await;
    let pp = PatchParams::default();
    api.patch_status("w", &pp, &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    // A merge patch of the object that tries to change the status: the spec changes, the
    // status does not.
    let patched = api
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"ready": false}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 2);
    assert_eq!(patched.data["status"], json!({"ready": true}));
    // A replace without a status keeps it as well.
    let mut replacement = patched.clone();
    replacement.data.as_object_mut().unwrap().remove("status");
    replacement.data["spec"]["size"] = json!(3);
    let replaced = api
        .replace("w", &PostParams::default(), &replacement)
        .await
        .unwrap();
    assert_eq!(replaced.data["spec"]["size"], 3);
    assert_eq!(replaced.data["status"], json!({"ready": true}));
    // An apply to the object: its status part is ignored, and not owned.
    let applied = api
        .patch(
            "w",
            &PatchParams::apply("m").force(),
            &Patch::Apply(json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"size": 4}, "status": {"ready": false},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.data["status"], json!({"ready": true}));
    assert_eq!(owned(&applied, "m", "Apply"), ["spec.size"]);
}

#[tokio::test]
async fn writes_to_status_change_only_the_status() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    let created = create_widget(&client, "w", json!({"size": 1})).await;
    let pp = PatchParams::default();
    let patched = api
        .patch_status("w", &pp, &Patch::Merge(json!({
            "metadata": {"labels": {"sneaky": "yes"}}, "spec": {"size": 9}, "status": {"ready": true},
        })))
        .await
        .unwrap();
    assert_eq!(patched.data["status"], json!({"ready": true}));
    assert_eq!(patched.data["spec"], json!({"size": 1}));
    assert!(
        patched
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .is_empty(),
        "metadata is not the status"
    );
    assert_eq!(generation(&patched), generation(&created));
    // replace_status: the same.
    let mut replacement = api.get("w").await.unwrap();
    replacement.data["spec"]["size"] = json!(7);
    replacement.data["status"] = json!({"ready": false, "reason": "r"});
    let replaced = api
        .replace_status("w", &PostParams::default(), &replacement)
        .await
        .unwrap();
    assert_eq!(
        replaced.data["status"],
        json!({"ready": false, "reason": "r"})
    );
    assert_eq!(replaced.data["spec"], json!({"size": 1}));
    // A resource without the subresource does not serve /status.
    let missing = raw(
        &client,
        "GET",
        "/apis/example.com/v1/gadgets/g/status",
        &[],
        None,
    )
    .await;
    assert_eq!(missing.unwrap_err().0, 404);
}

/// A custom resource's status write ignores the uid in its body (the real server's status
/// strategy copies the stored object's metadata over it first): it lands on the object of that
/// name, even one made again under it. A stale resourceVersion is still a conflict.
#[tokio::test]
async fn a_status_write_ignores_the_uid_but_not_the_resource_version_in_its_body() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    let created = create_widget(&client, "w", json!({"size": 1})).await;
    let other = "00000000-0000-0000-0000-000000000000";
    let applied = api
        .patch_status(
            "w",
            &PatchParams::apply("m").force(),
            &Patch::Apply(json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"uid": other}, "status": {"ready": true},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.data["status"], json!({"ready": true}));
    assert_eq!(applied.metadata.uid, created.metadata.uid);
    let stale = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": created.metadata.resource_version},
                "status": {"ready": false},
            })),
        )
        .await;
    assert_eq!(api_error(stale).0, 409);
    // The object's own writes still refuse another uid.
    let refused = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"uid": other}, "spec": {"size": 2}})),
        )
        .await;
    assert_eq!(api_error(refused).0, 422);
}
