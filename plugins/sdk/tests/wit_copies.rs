//! The copies of `wit/*.wit` handed to plugin authors are the
//! repository's WIT, byte for byte: this crate's (so a crate outside the
//! repository builds without it), `sdk-timing`'s, `sdk-deadlocks`' and the
//! JavaScript and Python templates' (so a team can copy a template directory
//! out and build it); `sdk-timing` and `sdk-deadlocks` also carry
//! `wit/timing.wit`, and `sdk-deadlocks` `wit/deadlocks.wit` (the templates
//! export neither).
//!
//! When the repository's WIT changes, copy it over each of them:
//! `for d in plugins/sdk plugins/sdk-timing plugins/sdk-deadlocks
//! plugins/templates/javascript plugins/templates/python; do
//! cp wit/policy.wit $d/wit/; done;
//! cp wit/timing.wit plugins/sdk-timing/wit/;
//! cp wit/timing.wit wit/deadlocks.wit plugins/sdk-deadlocks/wit/`.

use std::path::Path;

/// Each copy (relative to this crate) and the repository's file it copies.
const COPIES: [(&str, &str); 8] = [
    ("wit/policy.wit", "policy.wit"),
    ("../sdk-timing/wit/policy.wit", "policy.wit"),
    ("../sdk-timing/wit/timing.wit", "timing.wit"),
    ("../sdk-deadlocks/wit/policy.wit", "policy.wit"),
    ("../sdk-deadlocks/wit/timing.wit", "timing.wit"),
    ("../sdk-deadlocks/wit/deadlocks.wit", "deadlocks.wit"),
    ("../templates/javascript/wit/policy.wit", "policy.wit"),
    ("../templates/python/wit/policy.wit", "policy.wit"),
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn every_copy_is_the_repositorys_wit() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (copy, original) in COPIES {
        let wit = read(&here.join("../../wit").join(original));
        assert!(
            wit.contains("package lockbroker:policy@"),
            "wit/{original} is not the policy WIT"
        );
        assert!(
            read(&here.join(copy)) == wit,
            "plugins/sdk/{copy} differs from wit/{original}: copy wit/{original} over it"
        );
    }
}
