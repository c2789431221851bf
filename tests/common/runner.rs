//! One SlurmJob as the controller holds it, stepped through the controller's own core
//! (`slurmjob::act`) against the real local Slurm, without Kubernetes: sync an index of our
//! jobs, step, keep the status (tests/slurmjob.rs, tests/insight.rs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use slurm_operator::controller::slurmjob::act::{self, Env, Step, Target};
use slurm_operator::controller::slurmjob::lifecycle::Dependee;
use slurm_operator::controller::slurmjob::plan::to_cancel;
use slurm_operator::controller::slurmjob::submissions::Submissions;
use slurm_operator::crd::slurmjob::{Phase, SlurmJobSpec, SlurmJobStatus};
use slurm_operator::leader::Leadership;
use slurm_operator::slurm::SlurmClient;
use slurm_operator::slurm::tag::TagKey;
use slurm_operator::state::index::ClusterState;

/// A complete index of the jobs whose comment is a tag (ours and claims, as the poller keeps),
/// synced now (the time is taken before the request, so the
/// index never claims more than it saw).
pub async fn sync(client: &SlurmClient) -> ClusterState {
    let at = Utc::now();
    let jobs = client
        .jobs(None)
        .await
        .unwrap()
        .into_items()
        .unwrap_or_default();
    ClusterState {
        jobs: Arc::new(
            jobs.into_iter()
                .filter(|j| j.owner.is_some())
                .map(|j| (j.job_id, j))
                .collect(),
        ),
        jobs_synced_at: Some(at),
        ..Default::default()
    }
}

/// One SlurmJob as the controller would hold it, with the Events it published.
pub struct Runner {
    pub client: SlurmClient,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub spec: SlurmJobSpec,
    pub status: Option<SlurmJobStatus>,
    pub submissions: Submissions,
    pub started_at: DateTime<Utc>,
    pub events: Vec<&'static str>,
    pub leadership: Leadership,
}

impl Runner {
    pub fn new(slurm: &super::LocalSlurm, prefix: &str, spec: serde_json::Value) -> Self {
        let mut spec = spec;
        let object = spec.as_object_mut().unwrap();
        object.insert("clusterName".into(), json!("local"));
        object
            .entry("partition")
            .or_insert(json!(slurm.partition.clone()));
        object
            .entry("environment")
            .or_insert(json!({"PATH": "/usr/bin:/bin"}));
        Self {
            client: slurm.client(),
            name: super::unique(prefix),
            uid: uuid::Uuid::new_v4().to_string(),
            generation: 1,
            spec: serde_json::from_value(spec).unwrap(),
            status: None,
            submissions: Submissions::default(),
            started_at: Utc::now() - chrono::TimeDelta::seconds(1),
            events: Vec::new(),
            leadership: Leadership::always(),
        }
    }

    /// This SlurmJob as a tenant's: submitted, followed, changed and cancelled as Slurm user
    /// `user` (working in their home directory), as a namespace's access grants it.
    pub fn run_as(mut self, user: &str) -> Self {
        self.client = self.client.as_user(user).unwrap();
        if self.spec.working_directory.is_none() {
            self.spec.working_directory = Some(format!("/home/{user}"));
        }
        self
    }

    /// An edit of the spec: the next generation, as the API server counts them.
    pub fn edit(&mut self, change: impl FnOnce(&mut SlurmJobSpec)) {
        change(&mut self.spec);
        self.generation += 1;
    }

    /// This SlurmJob as a step sees it, with `status` as stored.
    pub fn target<'a>(&'a self, status: Option<&'a SlurmJobStatus>) -> Target<'a> {
        Target {
            name: &self.name,
            uid: &self.uid,
            generation: self.generation,
            spec: &self.spec,
            status,
            created: None,
            refusal: None,
        }
    }

    /// What a step of this process works with, `state` being its index.
    pub fn env<'a>(&'a self, state: &'a ClusterState) -> Env<'a> {
        Env {
            client: &self.client,
            submitter: &self.client,
            job_user: None,
            state,
            submissions: &self.submissions,
            started_at: self.started_at,
            now: Utc::now(),
            leadership: &self.leadership,
            took_over_at: None,
            acting_since: self.started_at,
            key: &KEY,
            searches: None,
            still_granted: &|| true,
        }
    }

    pub fn status(&self) -> SlurmJobStatus {
        self.status.clone().unwrap_or_default()
    }

    pub fn job_id(&self) -> u32 {
        u32::try_from(self.status().job_id.expect("no job id yet")).unwrap()
    }

    pub async fn step_with(&mut self, deps: impl Fn(&str) -> Option<Dependee>) -> Step {
        let state = sync(&self.client).await;
        let target = self.target(self.status.as_ref());
        let env = self.env(&state);
        let step = act::step(target, env, deps).await.unwrap();
        self.status = Some(step.status.clone());
        // Reasons are static words; kept as such so the assertions read as lists of them.
        let reasons = step.notices.iter().map(|n| match n.reason {
            std::borrow::Cow::Borrowed(reason) => reason,
            std::borrow::Cow::Owned(ref reason) => panic!("a reason that is not a word: {reason}"),
        });
        self.events.extend(reasons);
        step
    }

    pub async fn step(&mut self) -> Step {
        self.step_with(|_| None).await
    }

    /// Step until `done` holds for the status.
    pub async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&SlurmJobStatus) -> bool,
    ) {
        let started = Instant::now();
        loop {
            self.step().await;
            if done(&self.status()) {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "{}: timed out after {timeout:?} waiting for {what}; status {:?}",
                self.name,
                self.status
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub async fn until_phase(&mut self, phase: Phase, timeout: Duration) {
        self.until(&format!("phase {phase}"), timeout, |s| s.phase == phase)
            .await;
    }

    /// What the controller's finalizer does on delete.
    pub async fn delete(&mut self) {
        let state = sync(&self.client).await;
        for job_id in to_cancel(
            &self.uid,
            &self.status(),
            Some(&state),
            &self.submissions,
            &KEY,
        ) {
            act::cancel(&self.client, job_id).await.unwrap();
        }
    }
}

/// The tag key of these tests' "operator".
pub static KEY: std::sync::LazyLock<TagKey> = std::sync::LazyLock::new(TagKey::ephemeral);

pub fn script(body: &str) -> String {
    format!("#!/bin/sh\n{body}\n")
}
