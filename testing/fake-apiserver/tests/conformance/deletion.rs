//! Deletion: finalizers, preconditions, the garbage collector, the namespace controller.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use serde_json::{Value, json};

use crate::support::*;

fn finalizers(names: &[&str]) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"finalizers": names}}))
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_the_last_goes() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    let mut w = widget("w", json!({}));
    w.metadata.finalizers = Some(vec!["a".into(), "b".into()]);
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    let mut stream = api
        .watch(
            &WatchParams::default(),
            created.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let deleting = api
        .delete("w", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        generation(&deleting),
        generation(&created) + 1,
        "as the real server, a new generation"
    );
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(0));
    let got = api.get("w").await.unwrap();
    assert_eq!(
        got.metadata.deletion_timestamp,
        deleting.metadata.deletion_timestamp
    );
    // Deleting again changes nothing.
    let again = api
        .delete("w", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        deleting.metadata.resource_version
    );
    let pp = PatchParams::default();
    let one_left = api.patch("w", &pp, &finalizers(&["b"])).await.unwrap();
    assert!(one_left.metadata.deletion_timestamp.is_some());
    assert!(api.get_opt("w").await.unwrap().is_some());
    // No finalizer may be added to an object being deleted (422).
    let added = api.patch("w", &pp, &finalizers(&["b", "c"])).await;
    assert!(
        matches!(&added, Err(kube::Error::Api(s)) if s.code == 422
            && s.message.contains("no new finalizers can be added if the object is being deleted")),
        "{added:?}"
    );
    let answer = api.patch("w", &pp, &finalizers(&[])).await.unwrap();
    assert_eq!(
        answer.metadata.finalizers.unwrap_or_default(),
        Vec::<String>::new(),
        "the answer is the object as the request made it"
    );
    assert!(
        api.get_opt("w").await.unwrap().is_none(),
        "gone with the last finalizer"
    );
    // Removing the last finalizer deletes: no MODIFIED of the emptied object, and the DELETED
    // event carries the object as last stored (its last finalizer still listed).
    let events = next_events(&mut stream, 3).await;
    assert_eq!(
        events.iter().map(summary).collect::<Vec<_>>(),
        [
            ("MODIFIED", "w".into()),
            ("MODIFIED", "w".into()),
            ("DELETED", "w".into())
        ]
    );
    let WatchEvent::Deleted(gone) = &events[2] else {
        unreachable!()
    };
    assert_eq!(gone.metadata.finalizers, Some(vec!["b".to_owned()]));
    // Without finalizers an object goes at once.
    create_widget(&client, "plain", json!({})).await;
    api.delete("plain", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("plain").await.unwrap().is_none());
    assert_eq!(
        api_error(api.delete("plain", &DeleteParams::default()).await).0,
        404
    );
}

#[tokio::test]
async fn delete_preconditions_on_uid_and_resource_version() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    let w = create_widget(&client, "w", json!({})).await;
    let with = |uid: Option<&str>, rv: Option<&str>| DeleteParams {
        preconditions: Some(Preconditions {
            uid: uid.map(str::to_owned),
            resource_version: rv.map(str::to_owned),
        }),
        ..DeleteParams::default()
    };
    // An object of the same name but another uid (deleted and re-created meanwhile): 409.
    let wrong_uid = api
        .delete(
            "w",
            &with(Some("00000000-0000-0000-0000-000000000000"), None),
        )
        .await;
    assert_eq!(api_error(wrong_uid), (409, "Conflict".into()));
    let wrong_rv = api.delete("w", &with(None, Some("1"))).await;
    assert_eq!(api_error(wrong_rv).0, 409);
    assert!(api.get_opt("w").await.unwrap().is_some());
    api.delete(
        "w",
        &with(
            w.metadata.uid.as_deref(),
            w.metadata.resource_version.as_deref(),
        ),
    )
    .await
    .unwrap();
    assert!(api.get_opt("w").await.unwrap().is_none());
}

fn owned_by(name: &str, owners: &[&DynamicObject]) -> ConfigMap {
    let refs: Vec<Value> = owners
        .iter()
        .map(|o| json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": o.metadata.name, "uid": o.metadata.uid}))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": refs}})).unwrap()
}

#[tokio::test]
async fn the_garbage_collector_deletes_what_only_deleted_owners_owned() {
    let (_api, client) = server().await;
    let w = widgets(&client);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let one = create_widget(&client, "one", json!({})).await;
    let two = create_widget(&client, "two", json!({})).await;
    let post = PostParams::default();
    cms.create(&post, &owned_by("of-one", &[&one]))
        .await
        .unwrap();
    cms.create(&post, &owned_by("of-both", &[&one, &two]))
        .await
        .unwrap();
    let mut held = owned_by("of-one-held", &[&one]);
    held.metadata.finalizers = Some(vec!["f".into()]);
    cms.create(&post, &held).await.unwrap();
    cms.create(&post, &owned_by("unowned", &[])).await.unwrap();
    // An owner that a finalizer holds keeps its dependents.
    w.patch("one", &PatchParams::default(), &finalizers(&["f"]))
        .await
        .unwrap();
    w.delete("one", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("of-one").await.unwrap().is_some());
    w.patch("one", &PatchParams::default(), &finalizers(&[]))
        .await
        .unwrap();
    assert!(
        cms.get_opt("of-one").await.unwrap().is_none(),
        "its only owner is gone"
    );
    let of_both = cms.get("of-both").await.unwrap();
    assert!(
        of_both.metadata.deletion_timestamp.is_none(),
        "one owner of two remains"
    );
    let of_one_held = cms.get("of-one-held").await.unwrap();
    assert!(
        of_one_held.metadata.deletion_timestamp.is_some(),
        "deleted, held by its finalizer"
    );
    w.delete("two", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("of-both").await.unwrap().is_none());
    assert!(cms.get_opt("unowned").await.unwrap().is_some());
    // A cluster-scoped owner owns objects in any namespace.
    let g: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}),
    )
    .unwrap();
    let g = gadgets(&client).create(&post, &g).await.unwrap();
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "elsewhere");
    elsewhere
        .create(&post, &owned_by("of-gadget", &[&g]))
        .await
        .unwrap();
    gadgets(&client)
        .delete("g", &DeleteParams::default())
        .await
        .unwrap();
    assert!(elsewhere.get_opt("of-gadget").await.unwrap().is_none());
}

/// The resourceVersion of the first event of `kind` for `name` on a watch.
fn rv_of(events: &[WatchEvent<impl kube::Resource>], kind: &str, name: &str) -> Option<u64> {
    events.iter().find_map(|e| {
        let (k, o) = match e {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            _ => return None,
        };
        (k == kind && o.meta().name.as_deref() == Some(name)).then(|| rv(o))
    })
}

#[tokio::test]
async fn a_deleted_namespace_goes_pods_first_then_secrets_then_the_rest() {
    let (_api, client) = server().await;
    let post = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .create(
            &post,
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "doomed");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let w = widgets_in(&client, "doomed");
    let named = |name: &str, finalizer: bool| {
        let finalizers: Vec<&str> = if finalizer { vec!["hold"] } else { vec![] };
        json!({"metadata": {"name": name, "finalizers": finalizers}})
    };
    pods.create(&post, &serde_json::from_value(named("p", true)).unwrap())
        .await
        .unwrap();
    secrets
        .create(&post, &serde_json::from_value(named("s", false)).unwrap())
        .await
        .unwrap();
    cms.create(&post, &serde_json::from_value(named("c", false)).unwrap())
        .await
        .unwrap();
    let mut held = widget("w", json!({}));
    held.metadata.finalizers = Some(vec!["hold".into()]);
    w.create(&post, &held).await.unwrap();
    // A namespace elsewhere is not touched.
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&post, &serde_json::from_value(named("c", false)).unwrap())
        .await
        .unwrap();
    // Every event from here on (the latest resourceVersion: the list's).
    let from = cms
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut secret_events = secrets
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut cm_events = cms
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut widget_events = w
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut pod_events = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();

    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("doomed").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    // Nothing new in a terminating namespace: 403.
    let refused = cms
        .create(&post, &serde_json::from_value(named("new", false)).unwrap())
        .await;
    assert_eq!(api_error(refused), (403, "Forbidden".into()));
    // A second delete: 409, the namespace is on its way.
    assert_eq!(
        api_error(namespaces.delete("doomed", &DeleteParams::default()).await).0,
        409
    );
    // The Pod goes first; while it remains, everything else stays.
    assert!(
        pods.get("p")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert!(secrets.get_opt("s").await.unwrap().is_some());
    assert!(cms.get_opt("c").await.unwrap().is_some());
    assert!(
        w.get("w")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    // The Pod's finalizer goes (its kubelet and controllers are done): now the rest.
    pods.patch("p", &PatchParams::default(), &finalizers(&[]))
        .await
        .unwrap();
    assert!(secrets.get_opt("s").await.unwrap().is_none());
    assert!(cms.get_opt("c").await.unwrap().is_none());
    assert!(
        w.get("w")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "held by its finalizer"
    );
    assert!(
        namespaces.get_opt("doomed").await.unwrap().is_some(),
        "not empty yet"
    );
    // In that order: Pod, Secret, then the rest by resource (`example.com/v1/widgets` before
    // `v1/configmaps`) and name.
    let pod_gone = rv_of(&next_events(&mut pod_events, 2).await, "DELETED", "p").unwrap();
    let secret_gone = rv_of(&next_events(&mut secret_events, 1).await, "DELETED", "s").unwrap();
    let widget_marked = rv_of(&next_events(&mut widget_events, 1).await, "MODIFIED", "w").unwrap();
    let cm_gone = rv_of(&next_events(&mut cm_events, 1).await, "DELETED", "c").unwrap();
    assert!(
        pod_gone < secret_gone && secret_gone < widget_marked && widget_marked < cm_gone,
        "pod {pod_gone}, secret {secret_gone}, widget {widget_marked}, configmap {cm_gone}"
    );
    // The last finalizer goes: the namespace with it.
    w.patch("w", &PatchParams::default(), &finalizers(&[]))
        .await
        .unwrap();
    assert!(namespaces.get_opt("doomed").await.unwrap().is_none());
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt("c")
            .await
            .unwrap()
            .is_some()
    );
    quiet(&mut secret_events, Duration::from_millis(100)).await;
}
