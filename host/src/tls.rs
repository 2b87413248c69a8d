//! The HTTPS listener's TLS: certificates and keys from PEM files
//! (`[tls]`), mutual TLS with `client_ca_file`, and new files taken without
//! a restart.
//!
//! [`Tls`] holds the rustls config in force. Every handshake reads it, so
//! a reload applies to the next connection and leaves open ones alone.
//! [`Tls::watch`] re-reads the files when their modification time or size
//! changes (checked every [`CHECK_EVERY`]), and a config reload (SIGHUP,
//! `POST /v1/admin/reload`) re-reads them at once ([`Tls::retarget`]); a
//! file that does not load (half written, a key that does not match) is
//! logged and the config in force is kept.

use std::{
    io,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, RwLock,
    },
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};
use tokio::{net::TcpStream, sync::watch};
use tokio_rustls::{server::TlsStream, TlsAcceptor};

use crate::config::TlsConfig;

/// How often the files are looked at for changes.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The TLS of the listener: what is in force, and where it came from.
pub struct Tls {
    /// The files, as the config in force names them (a reload may name
    /// others).
    files: RwLock<TlsConfig>,
    current: RwLock<Arc<ServerConfig>>,
    /// What the files looked like when last loaded (or tried).
    seen: std::sync::Mutex<Vec<Stamp>>,
    /// When the certificate in force stops being valid (its `notAfter`,
    /// Unix seconds; 0 when it could not be read): the expiry gauge, so
    /// that an alert fires before clients start refusing the handshake.
    not_after: AtomicI64,
}

/// A file's modification time and size: a change of either is a new file.
type Stamp = Option<(SystemTime, u64)>;

impl Tls {
    /// Loads the files of `config`.
    ///
    /// # Errors
    /// A file cannot be read, holds no certificate or key, or the key does
    /// not match the certificate.
    pub fn load(config: &TlsConfig) -> anyhow::Result<Tls> {
        let seen = stamps(config);
        let server = server_config(config)?;
        Ok(Tls {
            files: RwLock::new(config.clone()),
            current: RwLock::new(server),
            seen: std::sync::Mutex::new(seen),
            not_after: AtomicI64::new(not_after(&config.cert_file)),
        })
    }

    /// When the certificate in force expires, in Unix seconds (0: unknown).
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// Completes a TLS handshake on `stream` with the config in force.
    ///
    /// # Errors
    /// The handshake failed (a client without an accepted certificate
    /// under mutual TLS, a client that does not speak TLS).
    pub async fn accept(&self, stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let config = self.current.read().expect("tls config").clone();
        TlsAcceptor::from(config).accept(stream).await
    }

    /// Re-reads the files if `force` or if any changed since last time.
    /// True when a new config is in force.
    pub fn reload(&self, force: bool) -> bool {
        let files = self.files.read().expect("tls files").clone();
        let now = stamps(&files);
        {
            let mut seen = self.seen.lock().expect("tls stamps");
            if !force && *seen == now {
                return false;
            }
            *seen = now;
        }
        match server_config(&files) {
            Ok(config) => {
                *self.current.write().expect("tls config") = config;
                self.not_after
                    .store(not_after(&files.cert_file), Ordering::Relaxed);
                tracing::info!(cert_file = %files.cert_file.display(), "TLS certificate reloaded");
                true
            }
            Err(err) => {
                tracing::error!(
                    "new TLS files not taken, the previous ones stay in force: {err:#}"
                );
                false
            }
        }
    }

    /// Reloads on a change of the files, until `stop`.
    pub async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            self.reload(false);
        }
    }

    /// Takes `files` (a reloaded config's `[tls]`, already [`check`]ed)
    /// and re-reads them now.
    pub fn retarget(&self, files: TlsConfig) {
        *self.files.write().expect("tls files") = files;
        self.reload(true);
    }
}

/// The `notAfter` of the first certificate of the PEM file `path` (the
/// server's own), in Unix seconds; 0 when it cannot be read (the handshake
/// config loaded it, so that is unexpected, and the gauge says "unknown").
fn not_after(path: &Path) -> i64 {
    let Ok(chain) = certificates(path) else {
        return 0;
    };
    chain
        .first()
        .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
        .map_or(0, |(_, cert)| cert.validity().not_after.timestamp())
}

/// Whether `files` make a working TLS config (for a config reload, before
/// it is taken).
///
/// # Errors
/// Why not: a file cannot be read, holds no certificate or key, or the
/// key does not fit.
pub fn check(files: &TlsConfig) -> anyhow::Result<()> {
    server_config(files).map(drop)
}

fn stamps(config: &TlsConfig) -> Vec<Stamp> {
    config
        .files()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

/// The rustls server config of the files of `config`.
fn server_config(config: &TlsConfig) -> anyhow::Result<Arc<ServerConfig>> {
    let chain = certificates(&config.cert_file)?;
    let key = private_key(&config.key_file)?;
    let builder = ServerConfig::builder();
    let builder = match &config.client_ca_file {
        Some(ca) => {
            let roots = Arc::new(roots(ca)?);
            let verifier = WebPkiClientVerifier::builder(roots)
                .build()
                .with_context(|| format!("client CA {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut server = builder.with_single_cert(chain, key).with_context(|| {
        format!(
            "the key in {} does not fit its certificate",
            config.key_file.display()
        )
    })?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(server))
}

/// Every certificate in a PEM file (a chain: the leaf first).
///
/// # Errors
/// The file cannot be read or holds none.
pub fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("malformed PEM in {}", path.display()))?;
    anyhow::ensure!(!chain.is_empty(), "no certificate in {}", path.display());
    Ok(chain)
}

/// The private key in a PEM file.
///
/// # Errors
/// The file cannot be read or holds no key.
pub fn private_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("no private key in {}", path.display()))
}

/// The certificates of a PEM file as trust anchors.
///
/// # Errors
/// As [`certificates`], or one is not a CA certificate rustls can use.
pub fn roots(path: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .with_context(|| format!("unusable CA certificate in {}", path.display()))?;
    }
    Ok(roots)
}

impl TlsConfig {
    /// The files the listener reads.
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        [
            Some(&self.cert_file),
            Some(&self.key_file),
            self.client_ca_file.as_ref(),
        ]
        .into_iter()
        .flatten()
    }
}
