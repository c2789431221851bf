//! Conformance tests: each behaviour the crate's documentation promises, driven through a real
//! kube client (and raw HTTP where a status code or a body's exact shape is the point), with
//! what the real kube-apiserver does as the expected outcome.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod crds;
mod deletion;
mod lists;
mod logs;
mod objects;
mod rbac;
mod status;
mod support;
mod watches;
mod writes;
