//! `Client::from_env` reads the variables every client reads, the TLS
//! files included, and names a file it cannot use. Alone in its test
//! binary: it sets the process's environment, which no other test may
//! read meanwhile.

use std::path::PathBuf;

use lockbroker_client::{Client, Error};

/// Sets `vars` (removing those set to `None`) and builds a client.
fn from(vars: &[(&str, Option<&str>)]) -> Result<Client, Error> {
    for (name, value) in vars {
        // One test in this binary: no other thread reads the environment
        // meanwhile.
        match value {
            Some(value) => std::env::set_var(name, value),
            None => std::env::remove_var(name),
        }
    }
    Client::from_env()
}

fn tls_file_named(result: Result<Client, Error>) -> PathBuf {
    match result {
        Err(Error::TlsFile { path, .. }) => path,
        Err(other) => panic!("not a TLS file error: {other}"),
        Ok(_) => panic!("built"),
    }
}

#[test]
fn the_environment_sets_the_url_key_and_tls_files() {
    let dir = std::env::temp_dir().join(format!("lbc-from-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert_file, key_file) = (dir.join("client.pem"), dir.join("client.key"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let (cert_path, key_path) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    let missing = dir.join("missing.pem");

    // All of them, good.
    from(&[
        ("LOCKBROKER_URL", Some("https://localhost:7443")),
        ("LOCKBROKER_API_KEY", Some("k")),
        ("LOCKBROKER_CA_FILE", Some(cert_path)),
        ("LOCKBROKER_CLIENT_CERT", Some(cert_path)),
        ("LOCKBROKER_CLIENT_KEY", Some(key_path)),
    ])
    .expect("a client");
    // Empty counts as unset.
    from(&[
        ("LOCKBROKER_CA_FILE", Some("")),
        ("LOCKBROKER_CLIENT_CERT", Some("")),
        ("LOCKBROKER_CLIENT_KEY", Some("")),
    ])
    .expect("a client without TLS files");
    // A CA file that is not there: named.
    let named = tls_file_named(from(&[(
        "LOCKBROKER_CA_FILE",
        Some(missing.to_str().unwrap()),
    )]));
    assert_eq!(named, missing);
    // A certificate without its key, and the reverse: the one given is
    // named.
    let named = tls_file_named(from(&[
        ("LOCKBROKER_CA_FILE", None),
        ("LOCKBROKER_CLIENT_CERT", Some(cert_path)),
        ("LOCKBROKER_CLIENT_KEY", None),
    ]));
    assert_eq!(named, cert_file);
    let named = tls_file_named(from(&[
        ("LOCKBROKER_CLIENT_CERT", None),
        ("LOCKBROKER_CLIENT_KEY", Some(key_path)),
    ]));
    assert_eq!(named, key_file);
    // A bad URL is still a URL error.
    let err = from(&[
        ("LOCKBROKER_CLIENT_KEY", None),
        ("LOCKBROKER_URL", Some("ftp://x")),
    ])
    .err()
    .expect("refused");
    assert!(matches!(err, Error::Url(_)), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
