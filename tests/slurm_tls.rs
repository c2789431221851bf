//! TLS to slurmrestd: verification against a supplied CA, refusal without it, and the explicit
//! opt-out. slurmrestd itself speaks plain HTTP here, so the test puts a TLS-terminating proxy
//! (a certificate from a throwaway CA) in front of the real local slurmrestd.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::tls::{pki, tls_proxy};
use slurm_operator::slurm::{ClientConfig, RetryPolicy, SlurmClient, SlurmError, TlsOptions};

fn client(slurm: &common::LocalSlurm, url: &str, tls: TlsOptions) -> SlurmClient {
    let config = ClientConfig::new(url)
        .unwrap()
        .with_tls(tls)
        .with_retry(RetryPolicy::none());
    SlurmClient::new(config, slurm.credentials()).unwrap()
}

#[tokio::test]
async fn https_is_verified_against_the_supplied_ca() {
    let slurm = require_slurm!();
    let ours = pki();
    let url = tls_proxy(&ours, &slurm.url).await;

    let trusted = TlsOptions {
        ca_pem: Some(ours.ca_pem.clone().into_bytes()),
        insecure_skip_verify: false,
    };
    let info = client(&slurm, &url, trusted).cluster_info().await.unwrap();
    assert_eq!(info.cluster_name, slurm.cluster_name);

    // The system roots do not know our throwaway CA: verification fails, with a TLS error.
    let err = client(&slurm, &url, TlsOptions::default())
        .cluster_info()
        .await
        .unwrap_err();
    assert!(matches!(err, SlurmError::Tls { .. }), "{err}");

    // Another CA: refused as well.
    let other = TlsOptions {
        ca_pem: Some(pki().ca_pem.into_bytes()),
        insecure_skip_verify: false,
    };
    let err = client(&slurm, &url, other)
        .cluster_info()
        .await
        .unwrap_err();
    assert!(matches!(err, SlurmError::Tls { .. }), "{err}");

    // Only the explicit opt-out connects without verification.
    let insecure = TlsOptions {
        ca_pem: None,
        insecure_skip_verify: true,
    };
    client(&slurm, &url, insecure).cluster_info().await.unwrap();
}

#[tokio::test]
async fn plain_http_server_behind_an_https_url_is_a_tls_error() {
    let slurm = require_slurm!();
    let url = slurm.url.replacen("http://", "https://", 1);
    let err = client(&slurm, &url, TlsOptions::default())
        .cluster_info()
        .await
        .unwrap_err();
    assert!(matches!(err, SlurmError::Tls { .. }), "{err}");
}
