//! Decoding SlurmJobs from the API server whatever a tenant nested in them.
//!
//! `spec.extraOptions` takes any JSON value (slurmrestd checks it), and the API server stores
//! values nested thousands of levels deep. serde_json refuses input nested more than 128 levels,
//! and `metadata.managedFields` nests as deep as the object's maps do. One such SlurmJob failed
//! every list page it was on and every watch event of it: the cache shared by all namespaces
//! never filled (no submit, status or cancel for any team), and its decoding error was logged with
//! the page, other teams' scripts included. Here an option nested deeper than
//! [`MAX_EXTRA_OPTION_DEPTH`] is skipped unread (serde_json skips without recursing) and kept as a
//! marker the submit refuses (`InvalidSpec`, naming the option), and `managedFields`, which the
//! operator never reads, is skipped whole.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use super::{SlurmJob, SlurmJobSpec, SlurmJobStatus};

/// How many lists or objects an `extraOptions` value may nest: Slurm's job options take a value,
/// or a list or object of values (`begin_time: {set, number}`), with room to spare.
pub const MAX_EXTRA_OPTION_DEPTH: usize = 8;

/// Appended to the key of an `extraOptions` value nested deeper than [`MAX_EXTRA_OPTION_DEPTH`].
/// Admission does not check these keys, so a tenant may write one so suffixed: it is refused
/// all the same (no option's name has a space), only with the depth as the reason.
pub const NESTED_TOO_DEEP: &str = " (nested too deep)";

/// Metadata nests a few levels (owner references, a list of objects): deeper is not an object
/// the API server stored.
const MAX_METADATA_DEPTH: usize = 4;

/// A JSON value nested at most `.0` lists or objects deep, or `None` (read past, unread) when it
/// nests deeper.
struct Bounded(usize);

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Some(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Some(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Some(inner) = self.0.checked_sub(1) else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(None);
        };
        let mut items = Some(Vec::new());
        while let Some(item) = seq.next_element_seed(Bounded(inner))? {
            match (item, items.as_mut()) {
                (Some(item), Some(items)) => items.push(item),
                (None, _) => items = None,
                (Some(_), None) => {}
            }
        }
        Ok(items.map(Value::Array))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some(inner) = self.0.checked_sub(1) else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(None);
        };
        let mut entries = Some(Map::new());
        while let Some(key) = map.next_key::<String>()? {
            match (map.next_value_seed(Bounded(inner))?, entries.as_mut()) {
                (Some(value), Some(entries)) => {
                    entries.insert(key, value);
                }
                (None, _) => entries = None,
                (Some(_), None) => {}
            }
        }
        Ok(entries.map(Value::Object))
    }
}

/// `spec.extraOptions`: a value nested deeper than [`MAX_EXTRA_OPTION_DEPTH`] is kept as `null`
/// under its key with [`NESTED_TOO_DEEP`] appended.
pub fn extra_options<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    struct Options;
    impl<'de> Visitor<'de> for Options {
        type Value = Option<Map<String, Value>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of job options")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut options = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                match map.next_value_seed(Bounded(MAX_EXTRA_OPTION_DEPTH))? {
                    Some(value) => options.insert(key, value),
                    None => options.insert(format!("{key}{NESTED_TOO_DEEP}"), Value::Null),
                };
            }
            Ok(Some(options))
        }
    }
    deserializer.deserialize_option(Options)
}

/// Object metadata without `managedFields`, skipped unread.
pub(crate) struct Metadata(pub(crate) ObjectMeta);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Metadata;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("object metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
                let mut fields = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "managedFields" {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                    let Some(value) = map.next_value_seed(Bounded(MAX_METADATA_DEPTH))? else {
                        return Err(de::Error::custom(format!(
                            "metadata.{key} nests more than {MAX_METADATA_DEPTH} levels deep"
                        )));
                    };
                    fields.insert(key, value);
                }
                ObjectMeta::deserialize(Value::Object(fields))
                    .map(Metadata)
                    .map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// A SlurmJob, decoded as described in the module's documentation.
pub fn slurm_job<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SlurmJob, D::Error> {
    struct Object;
    impl<'de> Visitor<'de> for Object {
        type Value = SlurmJob;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a SlurmJob")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SlurmJob, A::Error> {
            let mut metadata = None;
            let mut spec = None;
            let mut status = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                match key.as_ref() {
                    "metadata" => metadata = Some(map.next_value::<Metadata>()?.0),
                    "spec" => spec = Some(map.next_value::<SlurmJobSpec>()?),
                    "status" => status = map.next_value::<Option<SlurmJobStatus>>()?,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(SlurmJob {
                metadata: metadata.unwrap_or_default(),
                spec: spec.ok_or_else(|| de::Error::missing_field("spec"))?,
                status,
            })
        }
    }
    deserializer.deserialize_map(Object)
}

/// A whole SlurmJob as the controller reads and writes it through the API (a read, the answer
/// to a patch), decoded by [`slurm_job`]: [`SlurmJob`]'s own decoding takes every field.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct WholeSlurmJob(pub SlurmJob);

impl<'de> Deserialize<'de> for WholeSlurmJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        slurm_job(deserializer).map(Self)
    }
}

impl std::ops::Deref for WholeSlurmJob {
    type Target = SlurmJob;
    fn deref(&self) -> &SlurmJob {
        &self.0
    }
}

super::delegate_resource!(WholeSlurmJob, 0.metadata);

#[cfg(test)]
mod tests;
