//! Watches: a stream of events from the log, one JSON object a line.

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::Shared;
use crate::http::{Options, Target, json_response, metadata_view};
use crate::store::{Event, EventType, Failure, Store};

/// Whether an object is one the watch is about.
fn selected(target: &Target, options: &Options, namespace: &str, object: &Value) -> bool {
    (target.path.namespace.is_empty() || target.path.namespace == namespace)
        && options.selectors.matches(object)
}

/// What the watch sends for `event`: as the real server's watch cache, a change that makes an
/// object match is `ADDED`, one that makes it stop matching is `DELETED` (with the object as it
/// was, at the event's resourceVersion).
fn translate(target: &Target, options: &Options, event: &Event) -> Option<(EventType, Value)> {
    if event.resource != target.path.resource() {
        return None;
    }
    let now = selected(target, options, &event.namespace, &event.object);
    let before = event
        .previous
        .as_ref()
        .is_some_and(|p| selected(target, options, &event.namespace, p));
    match (event.kind, before, now) {
        (EventType::Modified, true, false) => {
            let mut object = event.previous.clone()?;
            object["metadata"]["resourceVersion"] = json!(event.rv.to_string());
            Some((EventType::Deleted, object))
        }
        (EventType::Modified, false, true) => Some((EventType::Added, event.object.clone())),
        (_, _, true) => Some((event.kind, event.object.clone())),
        _ => None,
    }
}

fn line(options: &Options, kind: EventType, object: &Value) -> String {
    let object = if options.metadata_only {
        metadata_view(object)
    } else {
        object.clone()
    };
    // The type first, as the real server writes it: a client reading the object straight on
    // (with nothing to buffer) depends on that order, which a JSON map would sort away.
    format!(
        "{{\"type\":{},\"object\":{}}}\n",
        json!(kind.as_str()),
        object
    )
}

/// Synthetic `ADDED` events for every object the watch is about, as they are now.
fn initial(store: &Store, target: &Target, options: &Options) -> Vec<String> {
    let resource = target.path.resource();
    store
        .objects
        .range((resource.clone(), String::new(), String::new())..)
        .take_while(|((r, ..), _)| *r == resource)
        .filter(|((_, ns, _), s)| selected(target, options, ns, &s.object))
        .map(|(_, s)| line(options, EventType::Added, &s.object))
        .collect()
}

/// The watch lines of the writes after resourceVersion `rv`, in order.
fn writes_after(store: &Store, target: &Target, options: &Options, rv: u64) -> Vec<String> {
    let start = store.log.partition_point(|e| e.rv <= rv);
    store.log[start..]
        .iter()
        .filter_map(|e| translate(target, options, e))
        .map(|(kind, object)| line(options, kind, &object))
        .collect()
}

pub(crate) fn response(shared: Shared, target: Target, options: Options) -> Response {
    // Subscribed before the store is read: a write after the read wakes this watch.
    let mut latest = shared.latest.subscribe();
    let (mut since, first) = {
        let store = shared.lock();
        match options.query.get("resourceVersion").map(String::as_str) {
            None | Some("" | "0") => (store.rv, initial(&store, &target, &options)),
            // What was written after `rv` before this watch began is its first events: no
            // later write may come to wake it for them.
            Some(rv) => match rv.parse::<u64>() {
                Ok(rv) => (store.rv, writes_after(&store, &target, &options, rv)),
                Err(_) => {
                    return Failure::BadRequest(format!("invalid resource version: {rv}"))
                        .response();
                }
            },
        }
    };
    let timeout = options
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(300), Duration::from_secs);
    let deadline = tokio::time::Instant::now() + timeout;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
    tokio::spawn(async move {
        let mut lines = first;
        loop {
            for line in lines {
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                changed = latest.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                () = tx.closed() => return,
            }
            let store = shared.lock();
            lines = writes_after(&store, &target, &options, since);
            since = store.rv;
        }
    });
    let stream = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|line| line.map(Ok::<_, std::io::Error>))
    });
    let mut response = json_response(StatusCode::OK, &Value::Null);
    *response.body_mut() = Body::from_stream(stream);
    response
}
