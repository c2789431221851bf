//! TLS to slurmrestd: verification against a supplied CA, refusal without it, and the explicit
//! opt-out. slurmrestd itself speaks plain HTTP here, so the test puts a TLS-terminating proxy
//! (a certificate from a throwaway CA) in front of the real local slurmrestd.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use slurm_operator::slurm::{ClientConfig, RetryPolicy, SlurmClient, SlurmError, TlsOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

struct Pki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivateKeyDer<'static>,
}

/// A CA and a certificate it signs for 127.0.0.1 and localhost.
fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server_chain: vec![server_cert.der().clone()],
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
    }
}

/// Terminate TLS on a loopback port and forward the bytes to slurmrestd. Returns the https URL.
async fn tls_proxy(pki: &Pki, upstream: &str) -> String {
    slurm_operator::tls::install_crypto_provider();
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(pki.server_chain.clone(), pki.server_key.clone_key())
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = url::Url::parse(upstream).unwrap();
    let upstream = format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    );
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                // A client that rejects our certificate ends the handshake: nothing to forward.
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let Ok(mut backend) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut backend).await;
            });
        }
    });
    format!("https://127.0.0.1:{port}")
}

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
