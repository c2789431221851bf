//! Strategic merge patch, as the real server applies it to the built-in kinds this project
//! touches: a JSON merge patch, except for the lists whose Go field carries a
//! `patchStrategy:"merge"` tag, which merge by their key (`patchMergeKey`) instead of being
//! replaced. Only those lists are known here (by field name: the built-in kinds served have no
//! two lists of one name with different strategies). Custom resources have no such tags: the
//! real server refuses a strategic merge patch of one (415), and so does [`crate::http`].
//! Not served: the patch directives (`$patch`, `$setElementOrder/…`, `$retainKeys`,
//! `$deleteFromPrimitiveList/…`), which would be stored as fields.

use serde_json::{Map, Value};

/// How a list field merges: by the key of its items (objects), or as a set (strings).
enum ListMerge {
    ByKey(&'static str),
    Set,
}

/// The merging lists of the built-in kinds served (core/v1 Pod, PodSpec, ObjectMeta, …).
fn list_merge(field: &str) -> Option<ListMerge> {
    Some(match field {
        "conditions" => ListMerge::ByKey("type"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "hostAliases" => ListMerge::ByKey(match field {
            "hostAliases" => "ip",
            _ => "name",
        }),
        "volumeMounts" => ListMerge::ByKey("mountPath"),
        "volumeDevices" => ListMerge::ByKey("devicePath"),
        "ports" => ListMerge::ByKey("containerPort"),
        "ownerReferences" => ListMerge::ByKey("uid"),
        "finalizers" => ListMerge::Set,
        _ => return None,
    })
}

/// Apply `patch` to `target`.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (field, value) in patch {
        if value.is_null() {
            target.remove(field);
            continue;
        }
        match (list_merge(field), value, target.get_mut(field)) {
            (Some(ListMerge::ByKey(key)), Value::Array(items), Some(Value::Array(current))) => {
                for item in items {
                    let found = current
                        .iter_mut()
                        .find(|c| item.get(key).is_some() && c.get(key) == item.get(key));
                    match found {
                        Some(existing) => merge(existing, item),
                        None => current.push(inserted(item)),
                    }
                }
            }
            (Some(ListMerge::Set), Value::Array(items), Some(Value::Array(current))) => {
                for item in items {
                    if !current.contains(item) {
                        current.push(item.clone());
                    }
                }
            }
            (_, Value::Object(_), Some(existing)) => merge(existing, value),
            _ => {
                target.insert(field.clone(), inserted(value));
            }
        }
    }
}

/// A patch value where the target has none: its nulls (deletions of nothing) left out.
fn inserted(value: &Value) -> Value {
    match value {
        Value::Object(_) => {
            let mut new = Value::Object(Map::new());
            merge(&mut new, value);
            new
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge;

    #[test]
    fn lists_with_a_merge_key_merge_by_it_and_others_are_replaced() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "spec": {"tolerations": [{"key": "t"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "Mine", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z"},
            ]},
        });
        merge(
            &mut pod,
            &json!({
                "metadata": {"finalizers": ["b", "a"], "labels": {"y": null},
                             "annotations": {"gone": null, "kept": "1"}},
                "spec": {"tolerations": [{"key": "u"}]},
                "status": {"conditions": [{"type": "Mine", "status": "True"}]},
            }),
        );
        assert_eq!(
            pod,
            json!({
                "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"},
                             "annotations": {"kept": "1"}},
                "spec": {"tolerations": [{"key": "u"}]},
                "status": {"conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                    {"type": "Mine", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                ]},
            })
        );
    }
}
