//! `https://` brokers: the client speaks TLS with rustls, trusts the roots
//! it is given (a `rustls` config, or a CA file) and only those, and
//! checks the server's name; a refused certificate is [`Error::Tls`]. The
//! server here is a TLS terminator answering one scripted request (the
//! broker's own TLS, mutual TLS included, is the conformance suite's C20,
//! `tests/rust_conformance.rs`).

use std::sync::Arc;

use lockbroker_client::{
    api::{AcquireRequest, Lease},
    rustls, Client, Error,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};
use tokio_rustls::TlsAcceptor;

const LEASE: &str = r#"{"key":"k","storage_key":"k","owner":"o","token":7,"hold_count":1,"ttl_ms":30000,"expires_at":"2026-11-21T10:00:00.000Z"}"#;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A self-signed certificate for `localhost` and a TLS server on loopback
/// that answers every request with `LEASE` (bounded: a few connections).
async fn tls_server() -> (u16, CertificateDer<'static>) {
    let (port, der, _pem) = tls_server_pem().await;
    (port, der)
}

/// [`tls_server`], with its certificate as PEM too.
async fn tls_server_pem() -> (u16, CertificateDer<'static>, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let pem = cert.cert.pem();
    let der = CertificateDer::from(cert.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = 0;
                while !String::from_utf8_lossy(&buf[..seen]).contains("\r\n\r\n") {
                    match tls.read(&mut buf[seen..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen += n,
                    }
                }
                // The acquire's body is small; wait for it whole.
                let _ = tokio::time::timeout(
                    std::time::Duration::from_millis(200),
                    tls.read(&mut buf[seen..]),
                )
                .await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{LEASE}",
                    LEASE.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, der, pem)
}

fn trusting(root: CertificateDer<'static>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// One acquire from the test server at `url`, trusting `tls` (the
/// system's roots when `None`).
async fn acquire_at(url: &str, tls: Option<rustls::ClientConfig>) -> Result<Lease, Error> {
    let mut builder = Client::builder(url).api_key("k");
    if let Some(tls) = tls {
        builder = builder.tls_config(tls);
    }
    let client = builder.build().unwrap();
    client.locks().acquire("k", &AcquireRequest::new("o")).await
}

#[tokio::test]
async fn an_https_broker_is_reached_through_the_given_roots() {
    let (port, root) = tls_server().await;
    let url = format!("https://localhost:{port}");
    let lease = acquire_at(&url, Some(trusting(root))).await.unwrap();
    assert_eq!(lease.token, 7);
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let (port, _root) = tls_server().await;
    // The system's roots do not include a self-signed test certificate.
    let err = acquire_at(&format!("https://localhost:{port}"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Tls(_)),
        "refused as a TLS failure: {err}"
    );
}

#[tokio::test]
async fn the_servers_name_is_checked() {
    let (port, root) = tls_server().await;
    // The certificate names `localhost`, not 127.0.0.1.
    let url = format!("https://127.0.0.1:{port}");
    let err = acquire_at(&url, Some(trusting(root))).await.unwrap_err();
    assert!(
        matches!(err, Error::Tls(_)),
        "a certificate for another name was accepted: {err}"
    );
}

#[tokio::test]
async fn a_ca_file_is_trusted() {
    let (port, _, pem) = tls_server_pem().await;
    let ca = std::env::temp_dir().join(format!("lbc-https-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, pem).unwrap();
    let client = Client::builder(&format!("https://localhost:{port}"))
        .api_key("k")
        .ca_file(&ca)
        .build()
        .unwrap();
    let lease = client
        .locks()
        .acquire("k", &AcquireRequest::new("o"))
        .await
        .unwrap();
    assert_eq!(lease.token, 7);
    let _ = std::fs::remove_file(ca);
}
