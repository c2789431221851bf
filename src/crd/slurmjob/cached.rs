//! What the SlurmJob controller's cache holds of each SlurmJob: [`CachedSlurmJob`] (here, with
//! the API types, for the metrics to read it too).
//!
//! The cache holds every SlurmJob of the watched namespaces for as long as it exists, finished
//! ones included, and a site keeps tens of thousands of them. As typed objects they cost ~2.7 KiB
//! each, most of it the inline size of `SlurmJob` (1 680 bytes: the spec's and the status' many
//! optional fields) whatever few of them are set; 100 000 SlurmJobs took the operator to 330 MiB
//! (hack/bench.sh, "the operator binary"). A cached SlurmJob is its metadata, the few fields the
//! triggers, watch predicates and metrics read on every event or scrape, and its spec and status
//! as deflated JSON, decoded only for the one SlurmJob a reconcile works on (microseconds, against
//! the reconcile's API and Slurm requests). A finished SlurmJob's spec and status are ~720 bytes
//! of JSON and ~300 deflated: its conditions repeat keys, times and messages.
//!
//! Decoding a SlurmJob from the API server makes the cached form directly (a page of a list is
//! never held as typed objects), and leaves out what the controller never reads from the cache
//! ([`trim`]).

use std::cell::RefCell;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};
use serde::{Deserialize, Deserializer, Serialize};

use super::{Phase, SlurmJob, SlurmJobSpec, SlurmJobStatus};
use crate::crd::{FINALIZER, SKIP_CANCEL_ANNOTATION};

/// A SlurmJob as the controller's cache holds it (see the module's documentation). Its
/// [`object`](Self::object) is the SlurmJob without what [`trim`] leaves out.
///
/// Sized to the allocator's classes: with the `Arc` the store wraps it in, it takes 448 bytes
/// (one more inline field would take 512), and spec and status are one allocation.
#[derive(Clone, PartialEq)]
pub struct CachedSlurmJob {
    metadata: ObjectMeta,
    cluster_name: Box<str>,
    /// `None`: no status yet.
    phase: Option<Phase>,
    job_id: Option<i64>,
    /// The status' `stateReason` (the metrics' pending reasons).
    state_reason: Option<Box<str>>,
    /// [`CachedSlurmJob::status_current`], decided when cached (a flag, not the generation:
    /// the struct stays within its allocation class).
    status_current: bool,
    /// The finalizers were more than [`MAX_KEPT_FINALIZERS`] allows: only the operator's is
    /// kept ([`trim`]), and a reconcile reads the object first
    /// ([`CachedSlurmJob::finalizers_cut`]).
    finalizers_cut: bool,
    /// [`Parts`] as deflated JSON.
    packed: Box<[u8]>,
}

/// Why a cached SlurmJob could not be decoded: never the object's fault (this process encoded
/// it), so a bug.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot encode the SlurmJob's spec and status")]
    Encode(#[source] serde_json::Error),
    #[error("cannot deflate the SlurmJob's spec and status: {0:?}")]
    Deflate(TDEFLStatus),
    #[error("cannot inflate the cached spec and status")]
    Inflate(#[source] miniz_oxide::inflate::DecompressError),
    #[error("cannot decode the cached spec and status")]
    Decode(#[source] serde_json::Error),
}

/// Deflate's level: the fastest, ~300 bytes for a finished SlurmJob's ~720 (the best level
/// saves a few bytes more at several times the time).
const LEVEL: u8 = 1;
/// Bound on an inflated entry: a SlurmJob is at most etcd's 1.5 MiB, and the cache leaves out
/// its largest parts.
const MAX_INFLATED: usize = 4 << 20;

/// Spec and status, as the cache encodes them.
#[derive(Serialize)]
struct Parts<'a> {
    spec: &'a SlurmJobSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a SlurmJobStatus>,
}

/// `json` deflated at [`LEVEL`], by a compressor kept per thread. miniz_oxide's
/// `compress_to_vec` makes a compressor for each call (~230 KiB allocated and zeroed): 32.4–32.7
/// µs for a 531-byte spec and status, 15.6–15.7 µs with one reset and reused (release build,
/// jemalloc). Every watch event of a SlurmJob is encoded so, and a relist of 100 000 SlurmJobs
/// encodes them all. miniz_oxide's own loop also panics where this one returns an error.
fn deflate(json: &[u8]) -> Result<Box<[u8]>, CacheError> {
    thread_local! {
        static COMPRESSOR: RefCell<Option<Box<CompressorOxide>>> = const { RefCell::new(None) };
    }
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        let compressor = slot.get_or_insert_with(new_compressor);
        compressor.reset();
        deflate_with(compressor, json)
    })
}

fn new_compressor() -> Box<CompressorOxide> {
    Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
        LEVEL.into(),
        0,
        0,
    )))
}

/// `json` deflated by `compressor`, fresh or reset.
fn deflate_with(compressor: &mut CompressorOxide, json: &[u8]) -> Result<Box<[u8]>, CacheError> {
    // Deflate grows incompressible input by a few bytes per block: one pass in practice.
    let mut out = vec![0; json.len() + json.len() / 8 + 64];
    let (mut input, mut written) = (json, 0);
    loop {
        let (status, read, wrote) =
            compress(compressor, input, &mut out[written..], TDEFLFlush::Finish);
        written += wrote;
        match status {
            TDEFLStatus::Done => {
                out.truncate(written);
                return Ok(out.into_boxed_slice());
            }
            TDEFLStatus::Okay => {
                input = input.get(read..).unwrap_or_default();
                out.resize(out.len() * 2, 0);
            }
            failed => return Err(CacheError::Deflate(failed)),
        }
    }
}

/// [`Parts`] decoded.
#[derive(Deserialize)]
struct OwnedParts {
    spec: SlurmJobSpec,
    #[serde(default)]
    status: Option<SlurmJobStatus>,
}

impl CachedSlurmJob {
    /// The cached form of `job`, trimmed ([`trim`]).
    pub fn new(mut job: SlurmJob) -> Result<Self, CacheError> {
        let finalizers_cut = trim(&mut job);
        let status = job.status.as_ref();
        let parts = Parts {
            spec: &job.spec,
            status,
        };
        Ok(Self {
            phase: status.map(|s| s.phase),
            job_id: status.and_then(|s| s.job_id),
            state_reason: status.and_then(|s| s.state_reason.as_deref().map(Box::from)),
            status_current: status.and_then(|s| s.observed_generation).unwrap_or(0)
                >= job.metadata.generation.unwrap_or(1),
            packed: deflate(&serde_json::to_vec(&parts).map_err(CacheError::Encode)?)?,
            cluster_name: job.spec.cluster_name.into_boxed_str(),
            metadata: job.metadata,
            finalizers_cut,
        })
    }

    /// The SlurmJob as cached: the whole object but for what [`trim`] leaves out.
    pub fn object(&self) -> Result<SlurmJob, CacheError> {
        let json = miniz_oxide::inflate::decompress_to_vec_with_limit(&self.packed, MAX_INFLATED)
            .map_err(CacheError::Inflate)?;
        let OwnedParts { spec, status } =
            serde_json::from_slice(&json).map_err(CacheError::Decode)?;
        Ok(SlurmJob {
            metadata: self.metadata.clone(),
            spec,
            status,
        })
    }

    /// `spec.clusterName`.
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// `status.phase`; `None` without a status.
    pub fn phase(&self) -> Option<Phase> {
        self.phase
    }

    /// `status.jobId`.
    pub fn job_id(&self) -> Option<i64> {
        self.job_id
    }

    /// `status.stateReason`.
    pub fn state_reason(&self) -> Option<&str> {
        self.state_reason.as_deref()
    }

    /// Whether the status has caught up with the spec (`observedGeneration` is the object's
    /// generation): an edit not reconciled yet may start a new run, so the status then speaks
    /// of a run that may no longer be the current one.
    pub fn status_current(&self) -> bool {
        self.status_current
    }

    /// Whether the cache kept only the operator's finalizer of the many the object has: its
    /// list as cached is not the object's, and the finalizer protocol's patches `test` the
    /// object's, so a reconcile works on the object read from the API server.
    pub fn finalizers_cut(&self) -> bool {
        self.finalizers_cut
    }
}

/// Names the object and what the triggers read; spec and status stay packed.
impl std::fmt::Debug for CachedSlurmJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSlurmJob")
            .field("namespace", &self.metadata.namespace)
            .field("name", &self.metadata.name)
            .field("uid", &self.metadata.uid)
            .field("generation", &self.metadata.generation)
            .field("cluster_name", &self.cluster_name)
            .field("phase", &self.phase)
            .field("job_id", &self.job_id)
            .field("packed_bytes", &self.packed.len())
            .finish_non_exhaustive()
    }
}

/// The finalizers a cached SlurmJob keeps as they are: this many, of at most
/// [`MAX_KEPT_FINALIZER_BYTES`] in all. Kubernetes bounds neither their number nor their size
/// (etcd's 1.5 MiB an object does), and a tenant may add any.
pub const MAX_KEPT_FINALIZERS: usize = 16;
/// See [`MAX_KEPT_FINALIZERS`].
pub const MAX_KEPT_FINALIZER_BYTES: usize = 2048;
/// The longest `slurm.rs/skip-cancel` value kept (it counts only as `"true"`).
const MAX_KEPT_ANNOTATION_BYTES: usize = 64;

/// What the cache leaves out of a SlurmJob: the `managedFields` (a third of a small object),
/// and none of what a tenant can make large that the controller does not read on every event —
/// the script (up to 1 MiB), the environment and extraOptions (a submit reads the whole spec
/// first), the labels, the owner references and the annotations but the operator's
/// `slurm.rs/skip-cancel` (up to 256 KiB of annotations, kubectl's copy of the whole object
/// among them; owner references and finalizers unbounded but by the object's size). A few
/// hundred SlurmJobs made large otherwise held hundreds of MiB at every start, enough to have
/// the operator killed for its memory limit over and over, for every team. Finalizers beyond
/// [`MAX_KEPT_FINALIZERS`] are cut to the operator's own; returns whether they were.
pub fn trim(job: &mut SlurmJob) -> bool {
    let meta = &mut job.metadata;
    meta.managed_fields = None;
    meta.labels = None;
    meta.owner_references = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.retain(|key, value| {
            key == SKIP_CANCEL_ANNOTATION && value.len() <= MAX_KEPT_ANNOTATION_BYTES
        });
    }
    let cut = meta.finalizers.as_ref().is_some_and(|list| {
        list.len() > MAX_KEPT_FINALIZERS
            || list.iter().map(String::len).sum::<usize>() > MAX_KEPT_FINALIZER_BYTES
    });
    if cut && let Some(list) = &mut meta.finalizers {
        list.retain(|f| f == FINALIZER);
        list.dedup();
        list.shrink_to_fit();
    }
    job.spec.script = String::new();
    job.spec.environment = Default::default();
    // What the checks made before a submit waits for its dependencies read
    // (`submit::check_names`), no values: `shared` (beside `exclusive`) and the first key that
    // is refused, as those checks take them in order. The allowed ones pass whatever they are.
    job.spec.extra_options = job.spec.extra_options.take().and_then(|extra| {
        let mut kept = serde_json::Map::new();
        if extra.contains_key("shared") {
            kept.insert("shared".to_owned(), serde_json::Value::Null);
        }
        if let Some(key) = extra
            .keys()
            .find(|key| crate::slurm::types::extra_option_refusal(key).is_some())
        {
            kept.insert(kept_key(key.clone()), serde_json::Value::Null);
        }
        (!kept.is_empty()).then_some(kept)
    });
    cut
}

/// Longest `extraOptions` key the cache keeps whole: every allowed key is far shorter, so a
/// longer one is refused all the same, named by its start.
const MAX_KEPT_KEY_CHARS: usize = 64;

/// `key`, or its first [`MAX_KEPT_KEY_CHARS`] characters and `…` (with the nested-too-deep
/// mark kept, which says why it is refused).
fn kept_key(key: String) -> String {
    if key.chars().count() <= MAX_KEPT_KEY_CHARS {
        return key;
    }
    let mark = if key.ends_with(super::NESTED_TOO_DEEP) {
        super::NESTED_TOO_DEEP
    } else {
        ""
    };
    let start: String = key.chars().take(MAX_KEPT_KEY_CHARS).collect();
    format!("{start}…{mark}")
}

/// Decoded as a SlurmJob, one object at a time ([`super::wire::slurm_job`]: whatever a tenant
/// nested in it), and kept in the cached form at once.
impl<'de> Deserialize<'de> for CachedSlurmJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let job = super::wire::slurm_job(deserializer)?;
        Self::new(job).map_err(serde::de::Error::custom)
    }
}

// The SlurmJob resource: the cache lists and watches SlurmJobs as this type.
super::delegate_resource!(CachedSlurmJob, metadata);

#[cfg(test)]
mod tests;
