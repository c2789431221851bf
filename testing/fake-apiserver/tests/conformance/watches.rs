//! Watches: from a resourceVersion, from now, filtered, metadata-only.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::support::*;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

#[tokio::test]
async fn a_watch_from_a_resource_version_sees_every_later_event_in_order() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let list = api.list(&Default::default()).await.unwrap();
    let from = list.metadata.resource_version.clone().unwrap();
    let pp = PatchParams::default();
    // Events after `from`, before the watch starts: it must see them all the same.
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    api.patch("before", &pp, &Patch::Merge(json!({"data": {"k": "1"}})))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    // And after.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.patch("before", &pp, &Patch::Merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    // Other namespaces are not this watch's.
    Api::<ConfigMap>::namespaced(client.clone(), "other")
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap();
    let events = next_events(&mut stream, 4).await;
    let seen: Vec<_> = events.iter().map(summary).collect();
    assert_eq!(
        seen,
        [
            ("ADDED", "a".into()),
            ("MODIFIED", "before".into()),
            ("DELETED", "a".into()),
            ("MODIFIED", "before".into())
        ]
    );
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => rv(o),
            _ => unreachable!(),
        })
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "in resourceVersion order: {rvs:?}"
    );
    assert!(rvs[0] > from.parse::<u64>().unwrap());
    quiet(&mut stream, Duration::from_millis(200)).await;
}

/// The writes after the resourceVersion made before the watch began come at once, with no
/// later write to wake the watch (kube's watcher lists, then watches from the list's version:
/// a write between the two must not wait for another).
#[tokio::test]
async fn a_watch_from_a_resource_version_sees_earlier_writes_without_a_later_one() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let list = api.list(&Default::default()).await.unwrap();
    let from = list.metadata.resource_version.clone().unwrap();
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let events = next_events(&mut stream, 1).await;
    let seen: Vec<_> = events.iter().map(summary).collect();
    assert_eq!(seen, [("ADDED", "a".into())]);
    quiet(&mut stream, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_watch_without_a_resource_version_starts_with_what_exists() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("gone", json!({})))
        .await
        .unwrap();
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    for from in ["0", ""] {
        let mut stream = api
            .watch(&WatchParams::default(), from)
            .await
            .unwrap()
            .boxed();
        let events = next_events(&mut stream, 1).await;
        assert_eq!(
            events.iter().map(summary).collect::<Vec<_>>(),
            [("ADDED", "a".into())],
            "from {from:?}"
        );
        quiet(&mut stream, Duration::from_millis(100)).await;
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"from": from}})),
        )
        .await
        .unwrap();
        let events = next_events(&mut stream, 1).await;
        assert_eq!(summary(&events[0]), ("MODIFIED", "a".into()));
    }
}

#[tokio::test]
async fn a_filtered_watch_sees_objects_start_and_stop_matching() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let from = api
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("team=a"), &from)
        .await
        .unwrap()
        .boxed();
    let pp = PatchParams::default();
    api.create(&PostParams::default(), &cm("x", json!({"team": "b"})))
        .await
        .unwrap();
    api.patch(
        "x",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    api.patch("x", &pp, &Patch::Merge(json!({"data": {"k": "v"}})))
        .await
        .unwrap();
    api.patch(
        "x",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}})),
    )
    .await
    .unwrap();
    api.patch("x", &pp, &Patch::Merge(json!({"data": {"k": "w"}})))
        .await
        .unwrap();
    let events = next_events(&mut stream, 3).await;
    assert_eq!(
        events.iter().map(summary).collect::<Vec<_>>(),
        [
            ("ADDED", "x".into()),
            ("MODIFIED", "x".into()),
            ("DELETED", "x".into())
        ]
    );
    // The DELETED carries the object as it last matched, at the event's resourceVersion.
    let WatchEvent::Deleted(last) = &events[2] else {
        unreachable!()
    };
    assert_eq!(last.metadata.labels.as_ref().unwrap()["team"], "a");
    let current = api.get("x").await.unwrap();
    assert!(rv(last) > rv(&events_object(&events[1])));
    assert!(rv(last) < rv(&current));
    quiet(&mut stream, Duration::from_millis(200)).await;

    // Field selector: one name.
    let mut named = api
        .watch(&WatchParams::default().fields("metadata.name=y"), &from)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("y", json!({})))
        .await
        .unwrap();
    let events = next_events(&mut named, 1).await;
    assert_eq!(
        summary(&events[0]),
        ("ADDED", "y".into()),
        "x's events are not this watch's"
    );
}

fn events_object(event: &WatchEvent<ConfigMap>) -> ConfigMap {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o.clone(),
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn a_metadata_only_watch_gets_metadata() {
    let (_api, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut stream = api
        .watch_metadata(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut with_data = cm("a", json!({"l": "v"}));
    with_data.data = Some([("k".to_owned(), "v".to_owned())].into());
    api.create(&PostParams::default(), &with_data)
        .await
        .unwrap();
    let events = next_events(&mut stream, 1).await;
    let WatchEvent::Added(meta) = &events[0] else {
        panic!("{:?}", events[0])
    };
    assert_eq!(meta.metadata.name.as_deref(), Some("a"));
    assert_eq!(meta.metadata.labels.as_ref().unwrap()["l"], "v");
    assert_eq!(meta.types.as_ref().unwrap().kind, "PartialObjectMetadata");
}
