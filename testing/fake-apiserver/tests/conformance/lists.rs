//! Lists: pages, selectors, metadata-only.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support::*;

async fn config_maps(
    client: &kube::Client,
    namespace: &str,
    items: &[(&str, serde_json::Value)],
) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for (name, labels) in items {
        let cm = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    api
}

fn names<K: kube::Resource + Clone>(list: &kube::core::ObjectList<K>) -> Vec<String> {
    list.items
        .iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn paged_list_with_limit_and_continue() {
    let (_api, client) = server().await;
    let api = config_maps(
        &client,
        NS,
        &[
            ("a", json!({})),
            ("b", json!({})),
            ("c", json!({})),
            ("d", json!({})),
            ("e", json!({})),
        ],
    )
    .await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    let token = first.metadata.continue_.clone().unwrap();
    // A write between pages: the pages still report the first page's resourceVersion (a watch
    // from it misses nothing).
    config_maps(&client, "elsewhere", &[("z", json!({}))]).await;
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c", "d"]);
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let third = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&third), ["e"]);
    assert_eq!(
        third.metadata.continue_.as_deref().unwrap_or(""),
        "",
        "the last page has no token"
    );
    // Unpaged: everything; the list's resourceVersion is the latest.
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&all), ["a", "b", "c", "d", "e"]);
    assert!(all.metadata.continue_.as_deref().unwrap_or("").is_empty());
}

#[tokio::test]
async fn an_object_deleted_between_pages_makes_no_other_one_skipped() {
    let (_api, client) = server().await;
    let api = config_maps(
        &client,
        NS,
        &[
            ("a", json!({})),
            ("b", json!({})),
            ("c", json!({})),
            ("d", json!({})),
            ("e", json!({})),
        ],
    )
    .await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        names(&second),
        ["c", "d"],
        "the page after b, whatever went before it"
    );
}

#[tokio::test]
async fn a_resource_version_0_list_is_served_whole() {
    let (_api, client) = server().await;
    config_maps(
        &client,
        NS,
        &[("a", json!({})), ("b", json!({})), ("c", json!({}))],
    )
    .await;
    let list = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=1&resourceVersion=0",
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert!(list["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn label_selectors() {
    let (_api, client) = server().await;
    let api = config_maps(
        &client,
        NS,
        &[
            ("prod-web", json!({"env": "prod", "tier": "web"})),
            (
                "prod-db",
                json!({"env": "prod", "tier": "db", "app.kubernetes.io/name": "pg"}),
            ),
            ("dev-web", json!({"env": "dev", "tier": "web"})),
            ("plain", json!({})),
        ],
    )
    .await;
    let select = |selector: &'static str| {
        let api = api.clone();
        async move {
            let mut names = names(
                &api.list(&ListParams::default().labels(selector))
                    .await
                    .unwrap(),
            );
            names.sort();
            names
        }
    };
    assert_eq!(select("env=prod").await, ["prod-db", "prod-web"]);
    assert_eq!(select("env==prod,tier=web").await, ["prod-web"]);
    assert_eq!(
        select("env!=prod").await,
        ["dev-web", "plain"],
        "!= matches objects without the label"
    );
    assert_eq!(select("tier").await, ["dev-web", "prod-db", "prod-web"]);
    assert_eq!(select("!tier").await, ["plain"]);
    assert_eq!(
        select("env in (dev, prod),tier notin (db)").await,
        ["dev-web", "prod-web"]
    );
    assert_eq!(
        select("tier notin (web)").await,
        ["plain", "prod-db"],
        "notin matches objects without the label"
    );
    assert_eq!(select("app.kubernetes.io/name=pg").await, ["prod-db"]);
    assert_eq!(select("env=staging").await, Vec::<String>::new());
    // Not a selector: 400, as the real server answers.
    let bad = api.list(&ListParams::default().labels("env in prod")).await;
    assert_eq!(api_error(bad).0, 400);
}

#[tokio::test]
async fn field_selectors_on_name_and_namespace() {
    let (_api, client) = server().await;
    config_maps(&client, "one", &[("a", json!({})), ("b", json!({}))]).await;
    config_maps(&client, "two", &[("a", json!({}))]).await;
    let all: Api<ConfigMap> = Api::all(client.clone());
    let listed = |selector: &'static str| {
        let all = all.clone();
        async move {
            let list = all
                .list(&ListParams::default().fields(selector))
                .await
                .unwrap();
            let mut found: Vec<String> = list
                .items
                .iter()
                .map(|o| format!("{}/{}", o.namespace().unwrap(), o.name_any()))
                .collect();
            found.sort();
            found
        }
    };
    assert_eq!(listed("metadata.name=a").await, ["one/a", "two/a"]);
    assert_eq!(listed("metadata.namespace=two").await, ["two/a"]);
    assert_eq!(
        listed("metadata.name==a,metadata.namespace!=two").await,
        ["one/a"]
    );
    assert_eq!(listed("metadata.name!=a").await, ["one/b"]);
    // Any other field is not selectable (as for a custom resource): 400, not "everything".
    let bad = all.list(&ListParams::default().fields("data.k=v")).await;
    assert_eq!(api_error(bad).0, 400);
}

#[tokio::test]
async fn metadata_only_lists_and_gets() {
    let (_api, client) = server().await;
    let api = config_maps(&client, NS, &[("a", json!({"x": "1"})), ("b", json!({}))]).await;
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(names(&list), ["a", "b"]);
    assert_eq!(
        list.items[0].labels().get("x").map(String::as_str),
        Some("1")
    );
    assert!(list.items[0].metadata.uid.is_some());
    let meta = api.get_metadata("a").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("a"));
    // On the wire: PartialObjectMetadata, without the data.
    let accept = [(
        "Accept",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )];
    let raw_list = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &accept,
        None,
    )
    .await
    .unwrap();
    assert_eq!(raw_list["kind"], "PartialObjectMetadataList");
    assert_eq!(raw_list["items"][0]["kind"], "PartialObjectMetadata");
    assert!(raw_list["items"][0].get("data").is_none());
    let accept = [(
        "Accept",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )];
    let raw_get = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &accept,
        None,
    )
    .await
    .unwrap();
    assert_eq!(raw_get["kind"], "PartialObjectMetadata");
    assert!(raw_get.get("data").is_none());
    // Without it: the whole object.
    let full = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(full["data"], json!({"k": "v"}));
}
