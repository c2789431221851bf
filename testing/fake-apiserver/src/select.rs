//! Label and field selectors, parsed once per request.

use std::collections::HashMap;

use serde_json::Value;

#[derive(Debug, Clone)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Equals(want), Some(v)) => v == want,
            (Op::NotEquals(want), v) => v != Some(want.as_str()),
            (Op::In(set), Some(v)) => set.iter().any(|s| s == v),
            (Op::NotIn(set), v) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Equals(_) | Op::In(_), None) => false,
        }
    }
}

/// The `labelSelector` and `fieldSelector` of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

/// Terms of a selector: split at the commas outside parentheses.
fn terms(selector: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&selector[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn label_requirement(term: &str) -> Result<Requirement, String> {
    let invalid = || format!("unable to parse requirement: {term:?}");
    let requirement = |key: &str, op| {
        let key = key.trim();
        valid_key(key)
            .then(|| Requirement {
                key: key.to_owned(),
                op,
            })
            .ok_or_else(invalid)
    };
    if let Some(open) = term.find('(') {
        let values = term[open + 1..].strip_suffix(')').ok_or_else(invalid)?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
        let mut words = term[..open].split_whitespace();
        let (Some(key), Some(op), None) = (words.next(), words.next(), words.next()) else {
            return Err(invalid());
        };
        return match op {
            "in" => requirement(key, Op::In(values)),
            "notin" => requirement(key, Op::NotIn(values)),
            _ => Err(invalid()),
        };
    }
    if let Some((key, value)) = term.split_once("!=") {
        requirement(key, Op::NotEquals(value.trim().to_owned()))
    } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        requirement(key, Op::Equals(value.trim().to_owned()))
    } else if let Some(key) = term.strip_prefix('!') {
        requirement(key, Op::DoesNotExist)
    } else {
        requirement(term, Op::Exists)
    }
}

fn field_requirement(term: &str) -> Result<Requirement, String> {
    let (field, op) = if let Some((field, value)) = term.split_once("!=") {
        (field, Op::NotEquals(value.to_owned()))
    } else if let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        (field, Op::Equals(value.to_owned()))
    } else {
        return Err(format!("invalid selector: {term:?}; can't understand"));
    };
    match field.trim() {
        "metadata.name" | "metadata.namespace" => Ok(Requirement {
            key: field.trim().to_owned(),
            op,
        }),
        other => Err(format!(
            "field label not supported: {other} (only metadata.name and metadata.namespace)"
        )),
    }
}

impl Selectors {
    pub fn parse(query: &HashMap<String, String>) -> Result<Self, String> {
        let labels = query
            .get("labelSelector")
            .map(|s| terms(s).into_iter().map(label_requirement).collect())
            .transpose()?
            .unwrap_or_default();
        let fields = query
            .get("fieldSelector")
            .map(|s| terms(s).into_iter().map(field_requirement).collect())
            .transpose()?
            .unwrap_or_default();
        Ok(Self { labels, fields })
    }

    pub fn matches(&self, object: &Value) -> bool {
        let meta = &object["metadata"];
        self.labels
            .iter()
            .all(|r| r.matches(meta["labels"][r.key.as_str()].as_str()))
            && self.fields.iter().all(|r| {
                let field = r.key.strip_prefix("metadata.").unwrap_or_default();
                // A cluster-scoped object is in namespace "".
                let value = meta[field]
                    .as_str()
                    .or((field == "namespace").then_some(""));
                r.matches(value)
            })
    }
}
