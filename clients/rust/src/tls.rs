//! The TLS settings of `https://` brokers: which roots are trusted (a CA
//! file's certificates, else the system's) and which client certificate is
//! presented to a broker that asks for one (mutual TLS), read from PEM
//! files. A file that cannot be read or used is an [`Error::TlsFile`]
//! naming it, when the client is built: not a handshake failure later.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
};

use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    ClientConfig, RootCertStore,
};

use crate::error::Error;

/// The PEM files of a client's TLS settings, as given to the builder or
/// read from `LOCKBROKER_CA_FILE`, `LOCKBROKER_CLIENT_CERT` and
/// `LOCKBROKER_CLIENT_KEY`.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFiles {
    /// The CA certificates to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// The client certificate (chain allowed) and its private key.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// True when nothing was given: the system's roots, no client
    /// certificate.
    pub(crate) fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.client_cert.is_none()
    }

    /// The rustls settings the files say.
    ///
    /// # Errors
    /// [`Error::TlsFile`] naming the file that cannot be read, holds no
    /// certificate (no key), or whose key does not match the certificate.
    pub(crate) fn config(&self) -> Result<ClientConfig, Error> {
        let roots = match &self.ca_file {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(path)? {
                    roots
                        .add(cert)
                        .map_err(|e| file_error(path, format!("not a CA certificate: {e}")))?;
                }
                roots
            }
            None => system_roots().clone(),
        };
        let builder = builder().with_root_certificates(roots);
        match &self.client_cert {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain = read_certs(cert)?;
                let private = read_key(key)?;
                builder.with_client_auth_cert(chain, private).map_err(|e| {
                    file_error(key, format!("cannot be used with {}: {e}", cert.display()))
                })
            }
        }
    }
}

/// The default settings of `https://`: the system's roots, no client
/// certificate; built once per process (reading the roots takes a few
/// milliseconds).
pub(crate) fn system() -> &'static ClientConfig {
    static TLS: OnceLock<ClientConfig> = OnceLock::new();
    TLS.get_or_init(|| {
        builder()
            .with_root_certificates(system_roots().clone())
            .with_no_client_auth()
    })
}

/// rustls with ring and its safe default protocol versions.
fn builder() -> rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
}

/// The system's root certificates. A system without roots gets an empty
/// store: http still works, https to a public CA fails with a certificate
/// error rather than the client failing to build.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        roots
    })
}

/// Every certificate of a PEM file (at least one).
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| file_error(path, format!("no PEM private key in it: {e}")))
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| file_error(path, format!("cannot be read: {e}")))
}

fn file_error(path: &Path, reason: String) -> Error {
    Error::TlsFile {
        path: path.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, contents: &[u8]) -> PathBuf {
        let path = std::env::temp_dir().join(format!("lbc-tls-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn named(err: Error) -> (PathBuf, String) {
        match err {
            Error::TlsFile { path, reason } => (path, reason),
            other => panic!("not a TLS file error: {other}"),
        }
    }

    #[test]
    fn nothing_given_is_the_systems_roots() {
        let files = TlsFiles::default();
        assert!(files.is_empty());
        assert!(files.config().is_ok());
    }

    #[test]
    fn a_missing_or_unusable_file_is_named() {
        let missing = std::env::temp_dir().join("lbc-tls-no-such-file.pem");
        let files = TlsFiles {
            ca_file: Some(missing.clone()),
            client_cert: None,
        };
        let (path, reason) = named(files.config().unwrap_err());
        assert_eq!(path, missing);
        assert!(reason.contains("cannot be read"), "{reason}");

        let garbage = temp("garbage.pem", b"not a certificate");
        let files = TlsFiles {
            ca_file: Some(garbage.clone()),
            client_cert: None,
        };
        let (path, reason) = named(files.config().unwrap_err());
        assert_eq!(path, garbage);
        assert!(reason.contains("no PEM certificate"), "{reason}");

        // A certificate file for a key: no key in it.
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert_file = temp("client.pem", cert.cert.pem().as_bytes());
        let files = TlsFiles {
            ca_file: None,
            client_cert: Some((cert_file.clone(), cert_file.clone())),
        };
        let (path, reason) = named(files.config().unwrap_err());
        assert_eq!(path, cert_file);
        assert!(reason.contains("no PEM private key"), "{reason}");

        // Another certificate's key.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key_file = temp("other.key", other.signing_key.serialize_pem().as_bytes());
        let files = TlsFiles {
            ca_file: None,
            client_cert: Some((cert_file.clone(), key_file.clone())),
        };
        let (path, reason) = named(files.config().unwrap_err());
        assert_eq!(path, key_file);
        assert!(reason.contains("cannot be used with"), "{reason}");

        // Its own key: fine.
        let own_key = temp("client.key", cert.signing_key.serialize_pem().as_bytes());
        let files = TlsFiles {
            ca_file: Some(cert_file.clone()),
            client_cert: Some((cert_file.clone(), own_key.clone())),
        };
        assert!(files.config().is_ok());
        for file in [garbage, cert_file, key_file, own_key] {
            let _ = std::fs::remove_file(file);
        }
    }
}
