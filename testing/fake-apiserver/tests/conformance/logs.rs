//! A Pod's log (`pods/{name}/log`): the kubelet's part, which this server has not, answers what
//! the test set (`FakeApiServer::set_pod_log`), whole; before that, the real server's refusal of
//! a container that has not started (400), and for a Pod that does not exist, 404.

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn a_pods_log_is_what_the_test_set() {
    let (api, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "ns");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let error = pods.logs("p", &LogParams::default()).await.unwrap_err();
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 400 && s.message.contains("waiting to start")),
        "{error:?}"
    );
    let missing = pods.logs("q", &LogParams::default()).await.unwrap_err();
    assert!(
        matches!(&missing, kube::Error::Api(s) if s.code == 404),
        "{missing:?}"
    );
    api.set_pod_log("ns", "p", "one\ntwo\n");
    assert_eq!(
        pods.logs("p", &LogParams::default()).await.unwrap(),
        "one\ntwo\n"
    );
    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let lines: Vec<String> = pods
        .log_stream("p", &follow)
        .await
        .unwrap()
        .lines()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(lines, ["one", "two"]);
}
