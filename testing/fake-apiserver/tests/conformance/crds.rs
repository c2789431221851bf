//! CustomResourceDefinitions: established at once, their resources served from then on.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use crate::support::*;

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[tokio::test]
async fn a_crd_is_established_on_creation_and_its_resource_served() {
    let api = fake_apiserver::FakeApiServer::start().await;
    let client = api.client();
    let sprockets = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v2", "Sprocket"),
        "sprockets",
    );
    let sprockets: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &sprockets);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.org/v2", "kind": "Sprocket", "metadata": {"name": "s"}, "spec": {"teeth": 12},
    }))
    .unwrap();
    // Not served before its CRD exists.
    assert_eq!(
        api_error(sprockets.create(&PostParams::default(), &object).await).0,
        404
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = serde_json::from_value(json!({
        "metadata": {"name": "sprockets.example.org"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "sprockets", "kind": "Sprocket"},
            "versions": [
                {"name": "v1", "served": false, "storage": false},
                {"name": "v2", "served": true, "storage": true, "subresources": {"status": {}}},
            ],
        },
    }))
    .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert!(established(&created), "{:?}", created.status);
    assert!(established(
        &crds.get("sprockets.example.org").await.unwrap()
    ));
    let s = sprockets
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    assert_eq!(s.types.unwrap().kind, "Sprocket");
    assert_eq!(s.metadata.generation, Some(1));
    // A version that is not served is not.
    let v1 = raw(
        &client,
        "GET",
        "/apis/example.org/v1/namespaces/default/sprockets",
        &[],
        None,
    )
    .await;
    assert_eq!(v1.unwrap_err().0, 404);
    // A CRD's name is `<plural>.<group>`.
    let mut misnamed = crd.clone();
    misnamed.metadata.name = Some("cogs.example.org".into());
    assert_eq!(
        api_error(crds.create(&PostParams::default(), &misnamed).await).0,
        422
    );
}

#[tokio::test]
async fn crds_given_at_start_are_established_and_served() {
    let (_api, client) = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["widgets.example.com", "gadgets.example.com"] {
        assert!(established(&crds.get(name).await.unwrap()), "{name}");
    }
    create_widget(&client, "w", json!({})).await;
    assert_eq!(
        widgets(&client)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}
