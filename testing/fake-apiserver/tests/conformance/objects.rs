//! What every object gets on create, and what bumps `generation`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn create_sets_uid_resource_version_generation_and_creation_timestamp() {
    let (_api, client) = server().await;
    let unix = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(now.unwrap().as_secs()).unwrap()
    };
    let before = unix();
    let a = create_widget(&client, "a", json!({"size": 1})).await;
    let b = create_widget(&client, "b", json!({"size": 1})).await;
    let (ua, ub) = (
        a.metadata.uid.clone().unwrap(),
        b.metadata.uid.clone().unwrap(),
    );
    assert_eq!(ua.len(), 36, "a UUID: {ua}");
    assert_ne!(ua, ub, "every object its own uid");
    assert!(rv(&a) > 0 && rv(&b) > rv(&a), "one growing counter");
    assert_eq!(generation(&a), 1);
    let created = a.metadata.creation_timestamp.clone().unwrap().0.as_second();
    assert!(
        created >= before - 1 && created <= unix(),
        "created at {created}, now {before}"
    );
    // What a get returns is what create returned.
    let got = widgets(&client).get("a").await.unwrap();
    assert_eq!(got.metadata.uid, a.metadata.uid);
    assert_eq!(got.metadata.resource_version, a.metadata.resource_version);
    assert_eq!(got.data["spec"], json!({"size": 1}));
    // Kinds without a generation (ConfigMaps, Secrets, Leases, Namespaces) get none.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(cm.metadata.generation, None);
    assert!(cm.metadata.uid.is_some() && cm.metadata.creation_timestamp.is_some());
    // An object naming another namespace than the request's is refused, not moved (400).
    let elsewhere = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "d", "namespace": "other"}}))
                .unwrap(),
        )
        .await;
    assert!(
        matches!(&elsewhere, Err(kube::Error::Api(s)) if s.code == 400
            && s.message.contains("does not match the namespace sent on the request")),
        "{elsewhere:?}"
    );
}

#[tokio::test]
async fn a_taken_name_is_409_already_exists_and_generate_name_picks_a_free_one() {
    let (_api, client) = server().await;
    create_widget(&client, "a", json!({})).await;
    let again = widgets(&client)
        .create(&PostParams::default(), &widget("a", json!({})))
        .await;
    assert_eq!(api_error(again), (409, "AlreadyExists".into()));
    let mut generated = widget("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("w-".into());
    let one = widgets(&client)
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let two = widgets(&client)
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let (one, two) = (one.metadata.name.unwrap(), two.metadata.name.unwrap());
    assert!(one.starts_with("w-") && one.len() > 2, "{one}");
    assert_ne!(one, two);
}

#[tokio::test]
async fn generation_follows_the_spec_not_metadata_or_status() {
    let (_api, client) = server().await;
    let api = widgets(&client);
    let w = create_widget(&client, "w", json!({"size": 1})).await;
    let merge = |v| Patch::Merge(v);
    let pp = PatchParams::default();
    // Metadata only: a new resourceVersion, the same generation.
    let labelled = api
        .patch(
            "w",
            &pp,
            &merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert!(rv(&labelled) > rv(&w));
    assert_eq!(generation(&labelled), 1);
    // Status only (through /status): the same generation.
    let statused = api
        .patch_status("w", &pp, &merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    assert!(rv(&statused) > rv(&labelled));
    assert_eq!(generation(&statused), 1);
    // The spec: the next generation.
    let changed = api
        .patch("w", &pp, &merge(json!({"spec": {"size": 2}})))
        .await
        .unwrap();
    assert_eq!(generation(&changed), 2);
    // A write that changes nothing changes neither resourceVersion nor generation.
    let same = api
        .patch("w", &pp, &merge(json!({"spec": {"size": 2}})))
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        changed.metadata.resource_version
    );
    assert_eq!(generation(&same), 2);

    // Without a status subresource the status is content like the spec: it bumps generation.
    let gadgets = gadgets(&client);
    let g: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"},
        "spec": {"a": 1}, "status": {"seen": false},
    }))
    .unwrap();
    let g = gadgets.create(&PostParams::default(), &g).await.unwrap();
    assert_eq!(
        g.data["status"],
        json!({"seen": false}),
        "no status subresource: create keeps it"
    );
    let g2 = gadgets
        .patch("g", &pp, &merge(json!({"status": {"seen": true}})))
        .await
        .unwrap();
    assert_eq!(generation(&g2), 2);
    let g3 = gadgets
        .patch(
            "g",
            &pp,
            &merge(json!({"metadata": {"annotations": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&g3), 2);
}
