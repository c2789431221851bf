//! The process's one rustls crypto provider.
//!
//! kube and reqwest both use rustls; the build enables exactly one provider (ring) and installs it
//! as the process default before any TLS client is built, so neither library has to guess.

use std::sync::Once;

/// Install ring as the process-wide rustls provider. Idempotent and cheap.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err means another provider was installed first (e.g. by an embedding program): keep it.
        if rustls::crypto::ring::default_provider()
            .install_default()
            .is_err()
        {
            tracing::debug!("a rustls crypto provider was already installed");
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn provider_is_installed_once_and_is_ring() {
        super::install_crypto_provider();
        super::install_crypto_provider();
        let provider = rustls::crypto::CryptoProvider::get_default().expect("a provider");
        assert!(!provider.cipher_suites.is_empty());
    }
}
