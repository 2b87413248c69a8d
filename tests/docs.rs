//! The documentation, checked: `docs/api.md` is generated from the OpenAPI
//! document (`host/src/openapi.json`) and must be current; every relative
//! link of README.md, BENCHMARKS.md and docs/*.md reaches a file (and a
//! `#anchor` one of its headings); every ```toml block is a broker config
//! the broker accepts (```toml fragment: valid TOML), every ```json block
//! parses; and the README's curl quickstart, run against a real broker,
//! answers what the README says it does.
//!
//! Regenerate `docs/api.md` with
//! `UPDATE_DOCS=1 cargo test -p lockbroker-tests --test docs`.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    path::{Path, PathBuf},
};

use lockbroker::Config;
use lockbroker_tests::Broker;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// README.md, BENCHMARKS.md and every page under docs/, as (path relative
/// to the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("readable docs/").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| path.strip_prefix(&root).expect("under the root").to_owned())
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            (path, text)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Markdown: fenced blocks, headings, links.

/// One fenced code block: its info string (```toml fragment → "toml
/// fragment"), its text (indentation of the fence removed) and the line
/// its fence opens on (1-based).
#[derive(Debug)]
struct Block {
    info: String,
    text: String,
    line: usize,
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }
}

/// The fenced blocks of a page, and the lines outside them (with their
/// numbers) for headings and links.
fn split(text: &str) -> (Vec<Block>, Vec<(usize, &str)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None if trimmed.starts_with("```") => {
                let block = Block {
                    info: trimmed.trim_start_matches('`').trim().to_owned(),
                    text: String::new(),
                    line: n + 1,
                };
                open = Some((indent, block));
            }
            None => prose.push((n + 1, line)),
            Some((_, block)) if trimmed.starts_with("```") => blocks.push(block),
            Some((fence_indent, mut block)) => {
                let cut = line.len() - line.trim_start().len();
                block.text.push_str(&line[cut.min(fence_indent)..]);
                block.text.push('\n');
                open = Some((fence_indent, block));
            }
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    (blocks, prose)
}

/// A line with its inline code spans blanked out (links inside them are
/// not links).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for ch in line.chars() {
        if ch == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(ch);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a line.
fn links(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut found = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                found.push(after[..end].trim().to_owned());
                rest = &after[end..];
            }
            None => break,
        }
    }
    found
}

/// GitHub's anchor for a heading's text: inline markup dropped, lower
/// case, punctuation removed, spaces made hyphens.
fn slug(heading: &str) -> String {
    // [text](url) → text
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) => {
                let mid = open + mid;
                let close = rest[mid..].find(')').map_or(rest.len(), |c| mid + c + 1);
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..mid]);
                rest = &rest[close..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|ch| match ch {
            ' ' => Some('-'),
            '-' | '_' => Some(ch),
            ch if ch.is_alphanumeric() => Some(ch),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (GitHub numbers repeats: `x`, `x-1`).
fn anchors(text: &str) -> Vec<String> {
    let (_, prose) = split(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        out.push(if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    out
}

#[test]
fn relative_links_resolve() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, text) in pages() {
        let (_, prose) = split(&text);
        let dir = path.parent().unwrap_or(Path::new("")).to_owned();
        for (n, line) in prose {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let file_path = if file.is_empty() {
                    path.clone()
                } else {
                    dir.join(file)
                };
                let full = root.join(&file_path);
                if !full.exists() {
                    broken.push(format!("{}:{n}: {target}: no such file", path.display()));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let target_text = std::fs::read_to_string(&full).unwrap_or_default();
                    if !anchors(&target_text).iter().any(|a| a == anchor) {
                        broken.push(format!(
                            "{}:{n}: {target}: no heading #{anchor} in {}",
                            path.display(),
                            file_path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" Policies (WebAssembly)"), "policies-webassembly");
    assert_eq!(
        slug(" `lockctl` and the Rust client"),
        "lockctl-and-the-rust-client"
    );
    assert_eq!(slug(" Lock-delay, min_hold"), "lock-delay-min_hold");
    assert_eq!(slug(" See [the API](api.md)"), "see-the-api");
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n"),
        ["a", "a-1"]
    );
}

/// Checks every ```{lang} block of the docs with `check` (what is wrong
/// with it, if anything); fails naming each bad block, or when fewer than
/// `at_least` were found.
fn check_blocks(lang: &str, at_least: usize, check: impl Fn(&Block) -> Option<String>) {
    let mut checked = 0;
    let mut bad = Vec::new();
    for (path, text) in pages() {
        for block in split(&text).0.iter().filter(|b| b.lang() == lang) {
            checked += 1;
            if let Some(why) = check(block) {
                bad.push(format!("{}:{}: {why}", path.display(), block.line));
            }
        }
    }
    assert!(checked >= at_least, "only {checked} {lang} blocks found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn toml_blocks_are_broker_configs() {
    check_blocks("toml", 3, |block| {
        if block.info.split_whitespace().any(|word| word == "fragment") {
            return block
                .text
                .parse::<toml::Table>()
                .err()
                .map(|err| format!("not TOML: {err}"));
        }
        match Config::from_toml(&block.text) {
            Ok(config) => config
                .validate()
                .err()
                .map(|err| format!("the broker refuses it: {err}")),
            Err(err) => Some(format!("not a broker config: {err}")),
        }
    });
}

#[test]
fn json_blocks_parse() {
    check_blocks("json", 3, |block| {
        serde_json::from_str::<Value>(&block.text)
            .err()
            .map(|err| err.to_string())
    });
}

// ---------------------------------------------------------------------------
// The README's quickstart, run.

/// Whether `actual` is what the README shows: the same fields, each equal,
/// where a shown `"..."` stands for any value.
fn shown_as(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(s), _) if s == "..." => true,
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, v)| a.get(k).is_some_and(|got| shown_as(v, got)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| shown_as(e, a))
        }
        _ => expected == actual,
    }
}

#[tokio::test]
async fn readme_quickstart_answers_as_shown() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = split(&readme).0;
    let quickstart: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.lang() == "sh" && b.text.contains("curl"))
        .collect();
    assert_eq!(quickstart.len(), 1, "README has one curl quickstart");
    let quickstart = quickstart[0];

    let curl = std::process::Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|out| out.status.success()),
        "the README's quickstart needs curl: install it (apt-get install curl)"
    );
    let broker = Broker::start().await;
    let addr = broker.url().trim_start_matches("http://").to_owned();

    // Each command is run in bash after the assignments above it; the
    // comment lines under it are its answer.
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut assignments = String::new();
    for line in quickstart.text.lines() {
        if let Some(shown) = line.strip_prefix('#') {
            let (_, answer) = steps.last_mut().expect("an answer follows a command");
            answer.push_str(shown.trim());
        } else if line.starts_with("curl") {
            steps.push((line.replace("localhost:7420", &addr), String::new()));
        } else if !line.trim().is_empty() {
            assignments.push_str(line);
            assignments.push('\n');
        }
    }
    assert!(steps.len() >= 2, "the quickstart acquires and releases");
    for (command, shown) in &steps {
        assert!(!shown.is_empty(), "`{command}` shows its answer");
        let output = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -eu\n{assignments}{command}"))
            .output()
            .await
            .expect("bash runs");
        assert!(output.status.success(), "`{command}` failed: {output:?}");
        let got: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|err| panic!("`{command}` answered no JSON ({err}): {output:?}"));
        let expected: Value = serde_json::from_str(shown)
            .unwrap_or_else(|err| panic!("the README's answer {shown} is no JSON: {err}"));
        assert!(
            shown_as(&expected, &got),
            "`{command}`\n  README: {expected}\n  broker: {got}"
        );
    }
    broker.stop().await;
}

// ---------------------------------------------------------------------------
// docs/api.md from the OpenAPI document.

/// A JSON object with its keys in document order (serde_json's map may sort
/// them): the order of the document's paths is the reading order.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ordered, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[derive(serde::Deserialize)]
struct Document {
    paths: Ordered,
}

/// The name a `$ref` points to.
fn ref_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

/// A link to a schema's section of api.md.
fn schema_link(reference: &str) -> String {
    let name = ref_name(reference);
    format!("[`{name}`](#{})", slug(name))
}

/// One line of text for a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A schema's type, briefly: `integer (int64)`, `string or null`, a link
/// to a named schema, `array of …`.
fn type_of(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        return schema_link(reference);
    }
    for combinator in ["oneOf", "anyOf", "allOf"] {
        if let Some(variants) = schema[combinator].as_array() {
            let sep = if combinator == "allOf" {
                " and "
            } else {
                " or "
            };
            return variants.iter().map(type_of).collect::<Vec<_>>().join(sep);
        }
    }
    let mut ty = match &schema["type"] {
        Value::String(ty) => ty.clone(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    if ty.starts_with("array") {
        ty = format!("array of {}", type_of(&schema["items"]));
    }
    if let Some(format) = schema["format"].as_str() {
        let _ = write!(ty, " ({format})");
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        let _ = write!(ty, ": {}", values.join(", "));
    }
    ty
}

/// The bounds of a schema, as `min 100, default 30000`.
fn bounds(schema: &Value) -> String {
    let mut out = Vec::new();
    for (key, name) in [
        ("minimum", "min"),
        ("maximum", "max"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("pattern", "pattern"),
        ("default", "default"),
    ] {
        if let Some(value) = schema.get(key) {
            let value = match value {
                Value::String(s) => format!("`{s}`"),
                other => other.to_string(),
            };
            out.push(format!("{name} {value}"));
        }
    }
    out.join(", ")
}

fn json_block(out: &mut String, value: &Value) {
    let text = serde_json::to_string_pretty(value).expect("JSON");
    let _ = writeln!(out, "```json\n{text}\n```\n");
}

/// The example of a request or response content: its own, or its schema's.
fn example_of(content: &Value, schemas: &BTreeMap<String, Value>) -> Option<Value> {
    if let Some(example) = content.get("example") {
        return Some(example.clone());
    }
    if let Some(examples) = content.get("examples").and_then(Value::as_object) {
        return examples.values().next().map(|e| e["value"].clone());
    }
    let name = ref_name(content["schema"]["$ref"].as_str()?);
    schemas.get(name)?["examples"].get(0).cloned()
}

fn example_block(out: &mut String, example: &Value) {
    match example {
        Value::String(text) => {
            let _ = writeln!(out, "```\n{}\n```\n", text.trim_end());
        }
        other => json_block(out, other),
    }
}

/// One operation: method (upper case), path, and its OpenAPI object.
type Operation = (String, String, Value);

/// Renders the OpenAPI document as Markdown: the operations by tag in the
/// document's order (summary, method and path, auth, description,
/// parameters, request body with its schema and example, responses), the
/// shared responses, then every schema.
fn render_api(openapi: &str) -> String {
    let raw: Value = serde_json::from_str(openapi).expect("openapi.json is JSON");
    let doc: Document = serde_json::from_str(openapi).expect("openapi.json has paths");
    let components = &raw["components"];
    let named = |section: &str| -> BTreeMap<String, Value> {
        components[section]
            .as_object()
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default()
    };
    let schemas = named("schemas");
    let shared = named("responses");
    let schemes = components["securitySchemes"].clone();

    let mut out = String::new();
    let _ = writeln!(out, "# HTTP API reference\n");
    let _ = writeln!(
        out,
        "<!-- Generated from host/src/openapi.json by tests/docs.rs; do not edit. \
         Regenerate with `UPDATE_DOCS=1 cargo test -p lockbroker-tests --test docs`. -->\n"
    );
    let _ = writeln!(
        out,
        "Generated from the OpenAPI document the broker serves at `GET /openapi.json` \
         (`host/src/openapi.json`, version {}). [Read first: the guide](README.md).\n",
        raw["info"]["version"].as_str().unwrap_or("?")
    );
    if let Some(description) = raw["info"]["description"].as_str() {
        let _ = writeln!(out, "{}\n", description.trim());
    }
    if let Some(servers) = raw["servers"].as_array() {
        let urls: Vec<String> = servers
            .iter()
            .filter_map(|s| s["url"].as_str())
            .map(|u| format!("`{u}`"))
            .collect();
        let _ = writeln!(out, "Default server: {}.\n", urls.join(", "));
    }
    let _ = writeln!(out, "Authentication (`Authorization: Bearer ...`):\n");
    if let Some(schemes) = schemes.as_object() {
        for (name, scheme) in schemes {
            let _ = writeln!(
                out,
                "- `{name}`: {}",
                cell(scheme["description"].as_str().unwrap_or(""))
            );
        }
    }
    out.push('\n');

    // Operations, grouped by tag.
    let tags: Vec<(String, String)> = raw["tags"]
        .as_array()
        .map(|tags| {
            tags.iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap_or("").to_owned(),
                        t["description"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let methods = ["get", "put", "post", "delete", "patch"];
    let mut by_tag: Vec<(String, Vec<Operation>)> =
        tags.iter().map(|(t, _)| (t.clone(), Vec::new())).collect();
    for (path, item) in &doc.paths.0 {
        for method in methods {
            let Some(op) = item.get(method) else { continue };
            let tag = op["tags"][0].as_str().unwrap_or("other").to_owned();
            let slot = match by_tag.iter().position(|(t, _)| *t == tag) {
                Some(slot) => slot,
                None => {
                    by_tag.push((tag, Vec::new()));
                    by_tag.len() - 1
                }
            };
            by_tag[slot]
                .1
                .push((method.to_uppercase(), path.clone(), op.clone()));
        }
    }

    let _ = writeln!(out, "## Contents\n");
    for (tag, ops) in &by_tag {
        let _ = writeln!(out, "- [{tag}](#{})", slug(tag));
        for (method, path, op) in ops {
            let summary = op["summary"].as_str().unwrap_or(path);
            let _ = writeln!(
                out,
                "  - [{summary}](#{}): `{method} {path}`",
                slug(summary)
            );
        }
    }
    let _ = writeln!(
        out,
        "- [Shared responses](#shared-responses)\n- [Schemas](#schemas)\n"
    );

    for (tag, ops) in &by_tag {
        let _ = writeln!(out, "## {tag}\n");
        if let Some((_, description)) = tags.iter().find(|(t, _)| t == tag) {
            let _ = writeln!(out, "{}\n", description.trim());
        }
        for (method, path, op) in ops {
            render_operation(&mut out, method, path, op, &schemas, &shared);
        }
    }

    let _ = writeln!(out, "## Shared responses\n");
    let _ = writeln!(
        out,
        "Answers many operations share (the error body is [`ErrorBody`](#errorbody)).\n"
    );
    for (name, response) in &shared {
        let _ = writeln!(out, "### {name}\n");
        let _ = writeln!(
            out,
            "{}\n",
            response["description"].as_str().unwrap_or("").trim()
        );
        if let Some(contents) = response["content"].as_object() {
            for content in contents.values() {
                if let Some(example) = example_of(content, &schemas) {
                    example_block(&mut out, &example);
                }
            }
        }
    }

    let _ = writeln!(out, "## Schemas\n");
    for (name, schema) in &schemas {
        render_schema(&mut out, name, schema);
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn render_operation(
    out: &mut String,
    method: &str,
    path: &str,
    op: &Value,
    schemas: &BTreeMap<String, Value>,
    shared: &BTreeMap<String, Value>,
) {
    let summary = op["summary"].as_str().unwrap_or(path);
    let _ = writeln!(out, "### {summary}\n");
    let _ = write!(out, "`{method} {path}`");
    if let Some(security) = op["security"].as_array() {
        let names: Vec<String> = security
            .iter()
            .filter_map(Value::as_object)
            .flat_map(|s| s.keys().map(|k| format!("`{k}`")))
            .collect();
        if !names.is_empty() {
            let _ = write!(out, " · auth: {}", names.join(" or "));
        }
    }
    let _ = writeln!(out, "\n");
    if let Some(description) = op["description"].as_str() {
        let _ = writeln!(out, "{}\n", description.trim());
    }

    if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
        let _ = writeln!(out, "| parameter | in | type | description |");
        let _ = writeln!(out, "|---|---|---|---|");
        for param in params {
            let required = if param["required"].as_bool() == Some(true) {
                ", required"
            } else {
                ""
            };
            let mut description = cell(param["description"].as_str().unwrap_or(""));
            if let Some(example) = param.get("example") {
                let _ = write!(description, " Example: `{}`.", cell(&example.to_string()));
            }
            let _ = writeln!(
                out,
                "| `{}` | {}{required} | {} | {description} |",
                param["name"].as_str().unwrap_or(""),
                param["in"].as_str().unwrap_or(""),
                type_of(&param["schema"]),
            );
        }
        out.push('\n');
    }

    if let Some(contents) = op["requestBody"]["content"].as_object() {
        for (media, content) in contents {
            let _ = writeln!(
                out,
                "Request body (`{media}`): {}\n",
                type_of(&content["schema"])
            );
            if let Some(example) = example_of(content, schemas) {
                example_block(out, &example);
            }
        }
    }

    if let Some(responses) = op["responses"].as_object() {
        let _ = writeln!(out, "| status | answer | body |");
        let _ = writeln!(out, "|---|---|---|");
        let mut success_example = None;
        for (code, response) in responses {
            let (response, shared_name) = match response["$ref"].as_str() {
                Some(reference) => (
                    shared
                        .get(ref_name(reference))
                        .cloned()
                        .unwrap_or(Value::Null),
                    Some(ref_name(reference)),
                ),
                None => (response.clone(), None),
            };
            let mut description = cell(response["description"].as_str().unwrap_or(""));
            if let Some(name) = shared_name {
                let _ = write!(description, " ([{name}](#{}))", slug(name));
            }
            let body: Vec<String> = response["content"]
                .as_object()
                .map(|contents| {
                    contents
                        .iter()
                        .map(|(media, content)| {
                            let media = media.split(';').next().unwrap_or(media);
                            format!("{} `{media}`", type_of(&content["schema"]))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(out, "| {code} | {description} | {} |", body.join(", "));
            if success_example.is_none() && code.starts_with('2') {
                success_example = response["content"]
                    .as_object()
                    .and_then(|contents| contents.values().find_map(|c| example_of(c, schemas)));
            }
        }
        out.push('\n');
        if let Some(example) = success_example {
            let _ = writeln!(out, "Example answer:\n");
            example_block(out, &example);
        }
    }
}

fn render_schema(out: &mut String, name: &str, schema: &Value) {
    let _ = writeln!(out, "### {name}\n");
    if let Some(description) = schema["description"].as_str() {
        let _ = writeln!(out, "{}\n", description.trim());
    }
    let mut parts = vec![schema.clone()];
    if let Some(all) = schema["allOf"].as_array() {
        let refs: Vec<String> = all
            .iter()
            .filter_map(|s| s["$ref"].as_str())
            .map(schema_link)
            .collect();
        if !refs.is_empty() {
            let _ = writeln!(out, "Has every field of {}, and:\n", refs.join(", "));
        }
        parts = all
            .iter()
            .filter(|s| s.get("$ref").is_none())
            .cloned()
            .collect();
    }
    if let Some(variants) = schema["oneOf"].as_array() {
        let _ = writeln!(out, "One of:\n");
        for variant in variants {
            let _ = writeln!(
                out,
                "- {}{}",
                type_of(variant),
                variant["description"]
                    .as_str()
                    .map(|d| format!(": {}", cell(d)))
                    .unwrap_or_default()
            );
        }
        out.push('\n');
        // An inline object variant shows its fields too.
        parts.retain(|part| part.get("oneOf").is_none());
        parts.extend(
            variants
                .iter()
                .filter(|v| v.get("properties").is_some())
                .cloned(),
        );
    }
    for part in &parts {
        let Some(properties) = part["properties"].as_object() else {
            continue;
        };
        let required: Vec<&str> = part["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(out, "| field | type | description |");
        let _ = writeln!(out, "|---|---|---|");
        // Required fields in their declared order (the `required` list keeps
        // it), then the optional ones by name.
        let mut fields: Vec<(&String, &Value)> = properties.iter().collect();
        fields.sort_by_key(|(field, _)| {
            let at = required.iter().position(|r| *r == field.as_str());
            (at.unwrap_or(usize::MAX), field.as_str())
        });
        for (field, property) in fields {
            let flag = if required.contains(&field.as_str()) {
                ", required"
            } else {
                ""
            };
            let mut description = cell(property["description"].as_str().unwrap_or(""));
            let bounds = bounds(property);
            if !bounds.is_empty() {
                let _ = write!(description, " ({bounds})");
            }
            let _ = writeln!(
                out,
                "| `{field}` | {}{flag} | {description} |",
                type_of(property)
            );
        }
        out.push('\n');
    }
    if schema.get("properties").is_none()
        && schema.get("allOf").is_none()
        && schema.get("oneOf").is_none()
    {
        let _ = writeln!(out, "Type: {}\n", type_of(schema));
    }
    if let Some(example) = schema["examples"].get(0) {
        let _ = writeln!(out, "Example:\n");
        json_block(out, example);
    }
}

#[test]
fn api_md_is_current() {
    let root = root();
    let openapi = std::fs::read_to_string(root.join("host/src/openapi.json")).unwrap();
    let generated = render_api(&openapi) + "\n";
    let path = root.join("docs/api.md");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).expect("write docs/api.md");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/api.md is stale: host/src/openapi.json changed. Regenerate it with \
         `UPDATE_DOCS=1 cargo test -p lockbroker-tests --test docs` and commit it."
    );
}

#[test]
fn api_md_covers_every_operation() {
    let openapi = std::fs::read_to_string(root().join("host/src/openapi.json")).unwrap();
    let doc: Document = serde_json::from_str(&openapi).unwrap();
    let rendered = render_api(&openapi);
    let mut operations = 0;
    for (path, item) in &doc.paths.0 {
        for (method, _) in item.as_object().unwrap() {
            operations += 1;
            let line = format!("`{} {path}`", method.to_uppercase());
            assert!(rendered.contains(&line), "api.md lacks {line}");
        }
    }
    assert!(operations >= 40, "only {operations} operations");
    for name in ["AcquireRequest", "Lease", "ErrorBody", "StreamEvent"] {
        assert!(
            rendered.contains(&format!("### {name}\n")),
            "api.md lacks {name}"
        );
    }
    // Every link in it reaches one of its own headings.
    let anchors = anchors(&rendered);
    for (_, line) in split(&rendered).1 {
        for target in links(line) {
            if let Some(anchor) = target.strip_prefix('#') {
                assert!(anchors.iter().any(|a| a == anchor), "api.md: no #{anchor}");
            }
        }
    }
}
