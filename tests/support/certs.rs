//! Test certificates made with the `openssl` command: CAs, and server and
//! client certificates they sign, in a directory removed when dropped.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

/// A directory of certificates and keys (readable by all: a server that
/// drops root to `mysql` must read them).
pub struct Certs(PathBuf);

impl Certs {
    pub fn new() -> Certs {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lbt-certs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
        Certs(dir)
    }

    /// The path of `name` in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// As a string, for a config or a command line.
    pub fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// A CA: `{name}.pem` and `{name}.key`.
    pub fn ca(&self, name: &str) -> &Certs {
        let (key, cert) = (format!("{name}.key"), format!("{name}.pem"));
        self.openssl(&["genrsa", "-out", &key, "2048"]);
        let subject = format!("/CN={name}");
        // Key usage and key identifiers as strict verifiers (Python 3.13's
        // default, VERIFY_X509_STRICT) want them.
        self.openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            &key,
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-out",
            &cert,
        ]);
        self
    }

    /// A certificate `{name}.pem` (and key `{name}.key`) for 127.0.0.1 and
    /// localhost with the common name `cn`, signed by the CA `ca`.
    pub fn signed(&self, name: &str, cn: &str, ca: &str) -> &Certs {
        let (key, cert, csr) = (
            format!("{name}.key"),
            format!("{name}.pem"),
            format!("{name}.csr"),
        );
        self.openssl(&["genrsa", "-out", &key, "2048"]);
        let subject = format!("/CN={cn}");
        self.openssl(&["req", "-new", "-key", &key, "-subj", &subject, "-out", &csr]);
        std::fs::write(
            self.path("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nauthorityKeyIdentifier=keyid,issuer\n",
        )
        .unwrap();
        let (ca_cert, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            &cert,
        ]);
        for file in [&key, &cert] {
            std::fs::set_permissions(self.path(file), PermissionsExt::from_mode(0o644)).unwrap();
        }
        self
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(&self.0)
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Default for Certs {
    fn default() -> Certs {
        Certs::new()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
