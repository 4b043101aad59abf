//! TLS through rustls (ring provider): the server's certificate and key from one PEM file
//! (`--tlsCertificateKeyFile`, as mongod's), client certificates checked against
//! `--tlsCAFile` when given.

use crate::config::{TlsConfig, TlsMode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The first byte of a TLS record carrying a handshake message (a ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot parse certificates in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in {}", path.display()));
    }
    Ok(certs)
}

/// The acceptor for `--tlsMode` other than `disabled` (None when TLS is off).
pub fn acceptor(cfg: &TlsConfig) -> Result<Option<TlsAcceptor>, String> {
    if cfg.mode == TlsMode::Disabled {
        return Ok(None);
    }
    let Some(key_file) = &cfg.certificate_key_file else {
        return Err("need tlsCertificateKeyFile or certificateSelector when TLS is enabled".into());
    };
    let certs = certificates(key_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("cannot read the private key in {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &cfg.ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certificates(ca)? {
                roots
                    .add(c)
                    .map_err(|e| format!("bad CA certificate in {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if cfg.allow_without_certificates {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key in {}: {e}", key_file.display()))?;
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// Under `allowTLS`/`preferTLS` a connection uses TLS when its first byte opens a TLS
/// handshake record; under `requireTLS` always.
pub async fn wants_tls(mode: TlsMode, stream: &tokio::net::TcpStream) -> bool {
    match mode {
        TlsMode::Disabled => false,
        TlsMode::RequireTls => true,
        TlsMode::AllowTls | TlsMode::PreferTls => {
            let mut first = [0u8; 1];
            matches!(stream.peek(&mut first).await, Ok(1) if first[0] == TLS_HANDSHAKE_RECORD)
        }
    }
}
