//! HTTP: routing a request to its resource, and the verbs (get, list, create, replace, patch,
//! apply, delete). Watches are in `watch.rs`.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::Shared;
use crate::fields::{self, Operation, Scope};
use crate::resources::{self, Path, ResourceInfo};
use crate::select::Selectors;
use crate::store::{Failure, Key, NAMESPACES, Store};

/// A request's resource, known to be served.
pub(crate) struct Target {
    pub path: Path,
    pub info: ResourceInfo,
}

impl Target {
    fn key(&self, name: &str) -> Key {
        (
            self.path.resource(),
            self.path.namespace.clone(),
            name.to_owned(),
        )
    }

    fn not_found(&self, name: &str) -> Failure {
        Failure::NotFound(format!("{} \"{name}\" not found", self.path.plural))
    }
}

/// The resource a path names, if it is served there.
pub(crate) fn resolve(store: &Store, path: &Path) -> Result<Target, Failure> {
    let missing = || {
        Failure::NotFound(format!(
            "the server could not find the requested resource ({})",
            path.resource()
        ))
    };
    let info =
        resources::lookup(store, &path.group, &path.version, &path.plural).ok_or_else(missing)?;
    if !info.namespaced && !path.namespace.is_empty() {
        return Err(missing());
    }
    if info.namespaced && path.namespace.is_empty() && path.name.is_some() {
        return Err(missing());
    }
    match path.subresource.as_deref() {
        None => {}
        Some("status") if info.status_subresource => {}
        Some("log") if path.group.is_empty() && path.plural == "pods" => {}
        Some(sub) => {
            return Err(Failure::NotFound(format!(
                "subresource {sub} of {} not served",
                path.resource()
            )));
        }
    }
    Ok(Target {
        path: path.clone(),
        info,
    })
}

pub(crate) fn query_map(query: Option<&str>) -> HashMap<String, String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

impl Failure {
    pub(crate) fn response(self) -> Response {
        let (code, reason, message) = match self {
            Self::BadRequest(m) => (StatusCode::BAD_REQUEST, "BadRequest", m),
            Self::Forbidden(m) => (StatusCode::FORBIDDEN, "Forbidden", m),
            Self::NotFound(m) => (StatusCode::NOT_FOUND, "NotFound", m),
            Self::MethodNotAllowed(m) => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", m),
            Self::AlreadyExists(m) => (StatusCode::CONFLICT, "AlreadyExists", m),
            Self::Conflict(m) => (StatusCode::CONFLICT, "Conflict", m),
            Self::Invalid(m) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid", m),
            Self::UnsupportedMediaType(m) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                m,
            ),
        };
        json_response(
            code,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code.as_u16(),
            }),
        )
    }
}

/// `GET pods/{name}/log`: the text the test set for the pod, whole (as a container that has
/// exited gives it, also with `follow`); a pod without any is one whose container has not
/// started, as the kubelet says.
fn pod_log(store: &Store, target: &Target, method: &Method) -> Response {
    let Some(name) = target.path.name.clone() else {
        return Failure::NotFound("a pod's log needs its name".into()).response();
    };
    if *method != Method::GET {
        return Failure::MethodNotAllowed(format!("{method} of a pod's log is not served"))
            .response();
    }
    if store.get(&target.key(&name)).is_none() {
        return target.not_found(&name).response();
    }
    match store
        .pod_logs
        .get(&(target.path.namespace.clone(), name.clone()))
    {
        Some(text) => {
            let mut response = Response::new(Body::from(text.clone()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            response
        }
        None => Failure::BadRequest(format!(
            "container in pod \"{name}\" is waiting to start: ContainerCreating"
        ))
        .response(),
    }
}

/// What a request asks for besides its path and body.
pub(crate) struct Options {
    pub query: HashMap<String, String>,
    pub selectors: Selectors,
    /// `Accept: ...;as=PartialObjectMetadata[List]`.
    pub metadata_only: bool,
    pub content_type: String,
}

pub(crate) async fn handle(State(shared): State<Shared>, request: Request) -> Response {
    let method = request.method().clone();
    let (content_type, metadata_only) = {
        let header = |name| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        (
            header(header::CONTENT_TYPE),
            header(header::ACCEPT).contains("as=PartialObjectMetadata"),
        )
    };
    let query = query_map(request.uri().query());
    let Some(path) = Path::parse(request.uri().path()) else {
        return Failure::NotFound(format!("no route {}", request.uri().path())).response();
    };
    let body = match axum::body::to_bytes(request.into_body(), 64 << 20).await {
        Ok(body) => body,
        Err(e) => return Failure::BadRequest(e.to_string()).response(),
    };
    let selectors = match Selectors::parse(&query) {
        Ok(selectors) => selectors,
        Err(message) => return Failure::BadRequest(message).response(),
    };
    let options = Options {
        query,
        selectors,
        metadata_only,
        content_type,
    };
    let mut store = shared.lock();
    let sub = path
        .subresource
        .as_deref()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    *store
        .requests
        .entry(format!("{method} {}{sub}", path.resource()))
        .or_default() += 1;
    if let Some(name) = &path.name {
        *store
            .object_requests
            .entry(format!(
                "{method} {}/{}/{name}{sub}",
                path.resource(),
                path.namespace
            ))
            .or_default() += 1;
    }
    // Authorization comes before the resource is looked up, as on the real server.
    if store.forbidden_namespaces.contains(&path.namespace) {
        return forbidden(&method, &path, watching(&options)).response();
    }
    let target = match resolve(&store, &path) {
        Ok(target) => target,
        Err(failure) => return failure.response(),
    };
    if path.subresource.as_deref() == Some("log") {
        let response = pod_log(&store, &target, &method);
        return response;
    }
    if method == Method::GET && watching(&options) {
        drop(store);
        return crate::watch::response(shared, target, options);
    }
    let result = dispatch(&mut store, &method, &target, &options, &body);
    store.settle();
    let rv = store.rv;
    drop(store);
    shared.written(rv);
    match result {
        Ok((code, value)) => json_response(code, &value),
        Err(failure) => failure.response(),
    }
}

fn watching(options: &Options) -> bool {
    options
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1")
}

/// RBAC's refusal, worded as the real server words it (the client's name aside).
fn forbidden(method: &Method, path: &Path, watch: bool) -> Failure {
    let verb = match (method.as_str(), &path.name) {
        ("GET", _) if watch => "watch",
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        _ => "use",
    };
    let resource = match &path.subresource {
        Some(sub) => format!("{}/{sub}", path.plural),
        None => path.plural.clone(),
    };
    let named = path
        .name
        .as_ref()
        .map(|name| format!(" \"{name}\""))
        .unwrap_or_default();
    let qualified = if path.group.is_empty() {
        path.plural.clone()
    } else {
        format!("{}.{}", path.plural, path.group)
    };
    Failure::Forbidden(format!(
        "{qualified}{named} is forbidden: User \"fake\" cannot {verb} resource \"{resource}\" \
         in API group \"{group}\" in the namespace \"{namespace}\"",
        group = path.group,
        namespace = path.namespace,
    ))
}

fn parse(body: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| Failure::BadRequest(format!("body: {e}")))
}

fn dispatch(
    store: &mut Store,
    method: &Method,
    target: &Target,
    options: &Options,
    body: &[u8],
) -> Result<(StatusCode, Value), Failure> {
    let manager = options
        .query
        .get("fieldManager")
        .map_or("unknown", String::as_str);
    let to_status = target.path.subresource.is_some();
    let scope = Scope::new(target.info.status_subresource, to_status);
    let Some(name) = target.path.name.clone() else {
        return match *method {
            Method::GET => Ok((StatusCode::OK, list(store, target, options))),
            Method::POST if target.info.namespaced && target.path.namespace.is_empty() => {
                Err(Failure::MethodNotAllowed(
                    "create of a namespaced resource needs a namespace".into(),
                ))
            }
            Method::POST => create(store, target, parse(body)?, manager),
            _ => Err(Failure::MethodNotAllowed(format!(
                "{method} of a collection is not served"
            ))),
        };
    };
    // A custom resource's status write takes nothing of the body's metadata: the real server's
    // status strategy (apiextensions-apiserver, `statusStrategy.PrepareForUpdate`) copies the
    // stored object over it, uid included, before any check. A resourceVersion is checked
    // before that, so it still is.
    let precondition = |current: &Value, new: &Value| {
        if to_status && target.info.custom {
            precondition(current, &without_uid(new))
        } else {
            precondition(current, new)
        }
    };
    let key = target.key(&name);
    let current = store
        .get(&key)
        .map(|s| s.object.clone())
        .ok_or_else(|| target.not_found(&name));
    match *method {
        Method::GET => {
            let current = current?;
            let view = if options.metadata_only {
                metadata_view(&current)
            } else {
                current
            };
            Ok((StatusCode::OK, view))
        }
        Method::PUT => {
            let current = current?;
            let new = parse(body)?;
            precondition(&current, &new)?;
            let new = scope.cut(&current, new);
            Ok((StatusCode::OK, store.update(&key, new, manager, None)?))
        }
        Method::PATCH if options.content_type.starts_with("application/apply-patch") => {
            let applied = parse(body)?;
            let force = options.query.get("force").is_some_and(|f| f == "true");
            match current {
                Err(_) if to_status => Err(target.not_found(&name)),
                Err(_) => {
                    let mut object = applied;
                    object["metadata"]["name"] = json!(name);
                    let created =
                        store.create(key, object, manager, Operation::Apply, &target.info)?;
                    Ok((StatusCode::CREATED, created))
                }
                Ok(current) => {
                    precondition(&current, &applied)?;
                    let owners = store
                        .get(&key)
                        .map(|s| s.owners.clone())
                        .unwrap_or_default();
                    let (new, owners) =
                        fields::apply(&current, &owners, &applied, manager, force, scope)?;
                    let written = store.update(&key, new, manager, Some(owners))?;
                    Ok((StatusCode::OK, written))
                }
            }
        }
        Method::PATCH => {
            let current = current?;
            let mut new = current.clone();
            if options.content_type.starts_with("application/json-patch") {
                let mut patch: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| Failure::BadRequest(format!("JSON patch: {e}")))?;
                // As the real server (evanphx/json-patch): `test` of a missing path against
                // null passes (kube-rs' finalizer helper sends one for an object without any).
                patch.0.retain(|op| match op {
                    json_patch::PatchOperation::Test(t) => {
                        !(t.value.is_null() && new.pointer(t.path.as_str()).is_none())
                    }
                    _ => true,
                });
                json_patch::patch(&mut new, &patch)
                    .map_err(|e| Failure::Invalid(format!("JSON patch failed: {e}")))?;
            } else if options
                .content_type
                .starts_with("application/strategic-merge-patch")
            {
                if target.info.custom {
                    return Err(Failure::UnsupportedMediaType(format!(
                        "the body of the request was in an unknown format - accepted media \
                         types include: application/json-patch+json, \
                         application/merge-patch+json, application/apply-patch+yaml \
                         ({} is a custom resource)",
                        target.info.kind
                    )));
                }
                let patch = parse(body)?;
                precondition(&current, &patch)?;
                crate::strategic::merge(&mut new, &patch);
            } else {
                let patch = parse(body)?;
                precondition(&current, &patch)?;
                json_patch::merge(&mut new, &patch);
            }
            precondition(&current, &new)?;
            let new = scope.cut(&current, new);
            Ok((StatusCode::OK, store.update(&key, new, manager, None)?))
        }
        Method::DELETE => {
            let current = current?;
            if !body.is_empty() {
                let options = parse(body)?;
                let pre = &options["preconditions"];
                for field in ["uid", "resourceVersion"] {
                    if let Some(want) = pre[field].as_str()
                        && current["metadata"][field].as_str() != Some(want)
                    {
                        return Err(Failure::Conflict(format!(
                            "Precondition failed: {field} in precondition: {want}, \
                             {field} in object meta: {}",
                            current["metadata"][field]
                        )));
                    }
                }
            }
            if key.0 == NAMESPACES && current["metadata"].get("deletionTimestamp").is_some() {
                return Err(Failure::Conflict(format!(
                    "Operation cannot be fulfilled on namespaces \"{name}\": The system is \
                     ensuring all content is removed from this namespace. Upon completion, this \
                     namespace will automatically be purged by the system."
                )));
            }
            let deleted = store.delete(&key).unwrap_or(current);
            Ok((StatusCode::OK, deleted))
        }
        _ => Err(Failure::MethodNotAllowed(format!("{method} is not served"))),
    }
}

fn create(
    store: &mut Store,
    target: &Target,
    mut object: Value,
    manager: &str,
) -> Result<(StatusCode, Value), Failure> {
    if object["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        let Some(prefix) = object["metadata"]["generateName"].as_str() else {
            return Err(Failure::Invalid(
                "metadata.name: Required value: name or generateName is required".into(),
            ));
        };
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        object["metadata"]["name"] = json!(format!("{prefix}{}", &suffix[..5]));
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let created = store.create(
        target.key(&name),
        object,
        manager,
        Operation::Update,
        &target.info,
    )?;
    Ok((StatusCode::CREATED, created))
}

/// `object` with no `metadata.uid`.
fn without_uid(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("uid");
    }
    object
}

/// A write that names a resourceVersion must name the current one; one that names a uid, the
/// object's own (as the real server: the uid is immutable, so a patch meant for an object
/// deleted and re-created under its name meanwhile is refused, 422).
fn precondition(current: &Value, new: &Value) -> Result<(), Failure> {
    if let (Some(uid), Some(own)) = (
        new["metadata"]["uid"].as_str(),
        current["metadata"]["uid"].as_str(),
    ) && uid != own
    {
        return Err(Failure::Invalid(format!(
            "{} \"{}\" is invalid: metadata.uid: Invalid value: \"{uid}\": field is immutable",
            current["kind"].as_str().unwrap_or("object"),
            current["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if Some(rv) != current["metadata"]["resourceVersion"].as_str() => {
            Err(Failure::Conflict(format!(
                "Operation cannot be fulfilled on {}: the object has been modified; please \
                 apply your changes to the latest version and try again",
                current["metadata"]["name"]
            )))
        }
        _ => Ok(()),
    }
}

pub(crate) fn metadata_view(object: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object["metadata"],
    })
}

/// A page of the objects that match: after the object the `continue` token names (so objects
/// deleted meanwhile make no one skipped), `limit` of them; every page reports the first page's
/// resourceVersion.
fn list(store: &Store, target: &Target, options: &Options) -> Value {
    let query = &options.query;
    let resource = target.path.resource();
    // The token: `<resourceVersion>/<namespace>/<name>` of the last object served.
    let token = query.get("continue").and_then(|c| {
        let mut parts = c.splitn(3, '/');
        let rv = parts.next()?.parse::<u64>().ok()?;
        Some((rv, parts.next()?.to_owned(), parts.next()?.to_owned()))
    });
    let rv = token.as_ref().map_or(store.rv, |(rv, ..)| *rv);
    let limit = query
        .get("limit")
        .filter(|_| query.get("resourceVersion").is_none_or(|rv| rv != "0"))
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let start = match &token {
        Some((_, ns, name)) => {
            std::ops::Bound::Excluded((resource.clone(), ns.clone(), name.clone()))
        }
        None => std::ops::Bound::Included((resource.clone(), String::new(), String::new())),
    };
    let mut matching = store
        .objects
        .range((start, std::ops::Bound::Unbounded))
        .take_while(|((r, ..), _)| *r == resource)
        .filter(|((_, ns, _), s)| {
            (target.path.namespace.is_empty() || *ns == target.path.namespace)
                && options.selectors.matches(&s.object)
        });
    let mut items = Vec::new();
    let mut last = None;
    for (key, stored) in matching.by_ref().take(limit) {
        items.push(if options.metadata_only {
            metadata_view(&stored.object)
        } else {
            stored.object.clone()
        });
        last = Some(key);
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some((_, ns, name)) = last
        && matching.next().is_some()
    {
        meta["continue"] = json!(format!("{rv}/{ns}/{name}"));
    }
    let (api_version, kind) = if options.metadata_only {
        (
            "meta.k8s.io/v1".to_owned(),
            "PartialObjectMetadataList".to_owned(),
        )
    } else {
        (
            target.path.api_version(),
            format!("{}List", target.info.kind),
        )
    };
    json!({"apiVersion": api_version, "kind": kind, "metadata": meta, "items": items})
}
