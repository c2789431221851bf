//! A server with two test CRDs, clients for their resources, and raw requests.

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams, WatchEvent};
use serde_json::{Value, json};

pub const NS: &str = "default";

/// `widgets.example.com`: namespaced, with a status subresource (as most custom resources).
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

/// `gadgets.example.com`: cluster-scoped, without a status subresource.
pub fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}

pub async fn server() -> (FakeApiServer, kube::Client) {
    let api = FakeApiServer::start_with_crds([widget_crd(), gadget_crd()]).await;
    let client = api.client();
    (api, client)
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", kind), plural)
}

pub fn widgets(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &resource("Widget", "widgets"))
}

pub fn widgets_in(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource("Widget", "widgets"))
}

pub fn gadgets(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("Gadget", "gadgets"))
}

/// Parameters of a (non-apply) patch by `manager`.
pub fn updater(manager: &str) -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(manager.to_owned()),
        ..Default::default()
    }
}

/// A Widget named `name` with `spec` (and `status`, which create drops).
pub fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

pub async fn create_widget(client: &kube::Client, name: &str, spec: Value) -> DynamicObject {
    widgets(client)
        .create(&PostParams::default(), &widget(name, spec))
        .await
        .unwrap()
}

pub fn rv(object: &impl kube::Resource) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn generation(object: &impl kube::Resource) -> i64 {
    object.meta().generation.unwrap()
}

/// The API error of a failed call: (HTTP code, reason).
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A raw request: `Ok(body)` or `Err((code, reason))`.
pub async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Result<Value, (u16, String)> {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let request = request.body(body).unwrap();
    client.request::<Value>(request).await.map_err(|e| match e {
        kube::Error::Api(status) => (status.code, status.reason.clone()),
        other => panic!("request failed: {other}"),
    })
}

/// The next `n` events of a watch (each within two seconds).
pub async fn next_events<K>(
    stream: &mut (impl Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
    n: usize,
) -> Vec<WatchEvent<K>> {
    let mut events = Vec::new();
    for _ in 0..n {
        let event = tokio::time::timeout(Duration::from_secs(2), stream.next())
            .await
            .expect("a watch event within 2 s")
            .expect("the watch goes on")
            .unwrap();
        events.push(event);
    }
    events
}

/// No further event arrives within `wait`.
pub async fn quiet<K: std::fmt::Debug>(
    stream: &mut (impl Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
    wait: Duration,
) {
    if let Ok(Some(event)) = tokio::time::timeout(wait, stream.next()).await {
        panic!("unexpected watch event: {event:?}");
    }
}

/// An event as (type, name).
pub fn summary<K: kube::Resource>(event: &WatchEvent<K>) -> (&'static str, String) {
    let (kind, object) = match event {
        WatchEvent::Added(o) => ("ADDED", o),
        WatchEvent::Modified(o) => ("MODIFIED", o),
        WatchEvent::Deleted(o) => ("DELETED", o),
        other => panic!("unexpected event {:?}", std::mem::discriminant(other)),
    };
    (kind, object.meta().name.clone().unwrap_or_default())
}

/// The fields (FieldsV1 keys, dotted) a manager owns through `operation`.
pub fn owned(object: &impl kube::Resource, manager: &str, operation: &str) -> Vec<String> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<String>) {
        let Some(map) = value.as_object().filter(|m| !m.is_empty()) else {
            out.push(prefix.to_owned());
            return;
        };
        for (k, v) in map {
            let k = k.strip_prefix("f:").unwrap_or(k);
            let path = if prefix.is_empty() {
                k.to_owned()
            } else {
                format!("{prefix}.{k}")
            };
            walk(&path, v, out);
        }
    }
    let mut out = Vec::new();
    for entry in object.meta().managed_fields.iter().flatten() {
        if entry.manager.as_deref() == Some(manager)
            && entry.operation.as_deref() == Some(operation)
            && let Some(fields) = &entry.fields_v1
        {
            walk("", &fields.0, &mut out);
        }
    }
    out.sort();
    out
}
