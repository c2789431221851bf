//! A forbidden namespace: every request in it is a 403, worded as RBAC words it; other
//! namespaces and cluster-scoped resources are served as before, and again once allowed.

use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::support::{gadgets, server, widget, widgets_in};

#[tokio::test]
async fn a_forbidden_namespace_refuses_every_request_in_it_alone() {
    let (api, client) = server().await;
    let object = |name: &str| widget(name, json!({}));
    let (team_a, team_b) = (widgets_in(&client, "team-a"), widgets_in(&client, "team-b"));
    team_b
        .create(&PostParams::default(), &object("w"))
        .await
        .unwrap();
    api.forbid_namespace("team-b");

    let refused = |result: Result<_, kube::Error>| match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected a 403, got {other:?}"),
    };
    let (code, reason, message) = refused(team_b.list(&ListParams::default()).await.map(drop));
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "widgets.example.com is forbidden: User \"fake\" cannot list resource \"widgets\" in \
         API group \"example.com\" in the namespace \"team-b\""
    );
    let (code, _, message) = refused(team_b.get("w").await.map(drop));
    assert_eq!(code, 403);
    assert!(
        message.starts_with("widgets.example.com \"w\" is forbidden"),
        "{message}"
    );
    assert!(message.contains("cannot get resource"), "{message}");
    let (code, _, _) = refused(
        team_b
            .create(&PostParams::default(), &object("x"))
            .await
            .map(drop),
    );
    assert_eq!(code, 403);
    let (code, _, message) = refused(
        team_b
            .watch(&kube::api::WatchParams::default(), "0")
            .await
            .map(drop),
    );
    assert_eq!(code, 403);
    assert!(message.contains("cannot watch resource"), "{message}");

    let (code, _, message) = refused(
        team_b
            .patch_status(
                "w",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"a": 1}})),
            )
            .await
            .map(drop),
    );
    assert_eq!(code, 403);
    assert!(
        message.contains("cannot patch resource \"widgets/status\""),
        "{message}"
    );

    // Elsewhere as before.
    team_a
        .create(&PostParams::default(), &object("w"))
        .await
        .unwrap();
    gadgets(&client).list(&ListParams::default()).await.unwrap();

    api.allow_namespace("team-b");
    let listed = team_b.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "nothing in it was lost");
}
