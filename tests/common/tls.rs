//! Certificates and a TLS-terminating proxy for tests of the client's TLS handling: slurmrestd
//! itself speaks plain HTTP here, so the proxy (with a throwaway certificate) stands in front of it.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub struct Pki {
    /// What a client would trust: the CA, or the certificate itself when it is self-signed.
    pub ca_pem: String,
    pub server_chain: Vec<CertificateDer<'static>>,
    pub server_key: PrivateKeyDer<'static>,
}

const NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// A CA and a certificate it signs for 127.0.0.1 and localhost.
pub fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params = CertificateParams::new(NAMES.map(str::to_owned).to_vec()).unwrap();
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server_chain: vec![server_cert.der().clone()],
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost (no CA at all).
pub fn self_signed() -> Pki {
    let certified = rcgen::generate_simple_self_signed(NAMES.map(str::to_owned).to_vec()).unwrap();
    Pki {
        ca_pem: certified.cert.pem(),
        server_chain: vec![certified.cert.der().clone()],
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        )),
    }
}

/// Terminate TLS on a loopback port and forward the bytes to slurmrestd. Returns the https URL.
pub async fn tls_proxy(pki: &Pki, upstream: &str) -> String {
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
