//! The copies of `wit/policy.wit` handed to plugin authors are the
//! repository's WIT, byte for byte: this crate's (so a crate outside the
//! repository builds without it), `sdk-timing`'s and the JavaScript and
//! Python templates' (so a team can copy a template directory out and build
//! it); `sdk-timing` also carries `wit/timing.wit` (the templates do not
//! export `timing`).
//!
//! When the repository's WIT changes, copy it over each of them:
//! `for d in plugins/sdk plugins/sdk-timing plugins/templates/javascript
//! plugins/templates/python; do cp wit/policy.wit $d/wit/; done;
//! cp wit/timing.wit plugins/sdk-timing/wit/`.

use std::path::Path;

const COPIES: [&str; 4] = [
    "wit/policy.wit",
    "../sdk-timing/wit/policy.wit",
    "../templates/javascript/wit/policy.wit",
    "../templates/python/wit/policy.wit",
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn every_copy_is_the_repositorys_wit() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let original = read(&here.join("../../wit/policy.wit"));
    assert!(
        original.contains("package lockbroker:policy@"),
        "not the policy WIT"
    );
    for copy in COPIES {
        assert!(
            read(&here.join(copy)) == original,
            "plugins/sdk/{copy} differs from wit/policy.wit: copy wit/policy.wit over it"
        );
    }
    let timing = read(&here.join("../../wit/timing.wit"));
    assert!(
        read(&here.join("../sdk-timing/wit/timing.wit")) == timing,
        "plugins/sdk-timing/wit/timing.wit differs from wit/timing.wit: copy it over"
    );
}
