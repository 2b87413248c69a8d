//! `componentize`: turns a core WebAssembly module built with wit-bindgen
//! into a component, as `wasm-tools component new` does, and prints the WIT
//! of a component, as `wasm-tools component wit` does.
//!
//! ```text
//! componentize IN.wasm OUT.wasm
//! componentize --print-wit FILE.wasm
//! ```
//!
//! `scripts/build-plugins` uses it to build lockbroker's policy plugins.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use wit_component::{ComponentEncoder, DecodedWasm, Output, WitPrinter};

const USAGE: &str =
    "usage: componentize IN.wasm OUT.wasm\n       componentize --print-wit FILE.wasm";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--print-wit", file] => print_wit(Path::new(file)),
        ["-h" | "--help"] => {
            println!("{USAGE}");
            Ok(())
        }
        [input, output] if !input.starts_with('-') && !output.starts_with('-') => {
            componentize(Path::new(input), Path::new(output))
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("componentize: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Encodes the core module at `input` as a component at `output`.
fn componentize(input: &Path, output: &Path) -> Result<()> {
    let module = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    if wasm_kind(&module) != Some(WasmKind::Module) {
        bail!("{} is not a core WebAssembly module", input.display());
    }
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .with_context(|| format!("reading the WIT metadata of {}", input.display()))?
        .encode()
        .with_context(|| format!("encoding {} as a component", input.display()))?;
    std::fs::write(output, component).with_context(|| format!("writing {}", output.display()))
}

/// Prints the WIT of the component (or binary WIT package) at `file`.
fn print_wit(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    match wasm_kind(&bytes) {
        Some(WasmKind::Component) => {}
        Some(WasmKind::Module) => bail!(
            "{} is a core WebAssembly module, not a component",
            file.display()
        ),
        None => bail!("{} is not WebAssembly", file.display()),
    }
    let decoded = wit_component::decode(&bytes)
        .with_context(|| format!("decoding the WIT of {}", file.display()))?;
    let resolve = decoded.resolve();
    let main = decoded.package();
    let nested: Vec<_> = resolve
        .packages
        .iter()
        .map(|(id, _)| id)
        .filter(|&id| id != main)
        .collect();
    let mut printer = WitPrinter::default();
    printer.print(resolve, main, &[])?;
    // As WitPrinter::print with `nested`, plus a blank line after the main
    // package.
    for id in nested {
        printer.output.newline();
        printer.print_package(resolve, id, false)?;
    }
    let what = match decoded {
        DecodedWasm::Component(..) => "component",
        DecodedWasm::WitPackage(..) => "WIT package",
    };
    println!("// {what}: {}", file.display());
    print!("{}", printer.output);
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum WasmKind {
    Module,
    Component,
}

/// Tells a core module from a component by the preamble: the magic number,
/// then a version (1) and a layer (0 for modules, 1 for components).
fn wasm_kind(bytes: &[u8]) -> Option<WasmKind> {
    match bytes.get(..8)? {
        [0, b'a', b's', b'm', _, _, 0, 0] => Some(WasmKind::Module),
        [0, b'a', b's', b'm', _, _, 1, 0] => Some(WasmKind::Component),
        _ => None,
    }
}
