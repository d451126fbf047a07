//! The crate's layers, checked: which top-level module of `src/` refers to
//! which, read from the source text (`crate::<module>` paths outside
//! comments), must form a graph without cycles, with the floor importing
//! nothing above it and the pool and the breaker never importing each other.
//!
//! Run with `--nocapture` to print the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floor: modules every layer may use, which use no layer themselves.
const FLOOR: &[&str] = &["classify", "clock", "error", "histogram", "listeners", "sync", "time"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/pool/call.rs` -> `pool`), or
/// `None` for `lib.rs`, whose `pub use` block names every module.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src/");
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    if first == "lib.rs" { None } else { Some(first.trim_end_matches(".rs").to_owned()) }
}

/// The items `lib.rs` re-exports, each with the module it comes from
/// (`Dependency` -> `dependency`), read from its `module::{A, B}` lines.
fn exports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // Only the re-export block itself, not the examples in the crate docs.
    let start = lib.find("pub use crate::{").expect("lib.rs has a `pub use crate::{..}` block");
    let block = &lib[start..];
    let mut rest = &block[..block.find("\n};").unwrap_or(block.len())];
    while let Some(at) = rest.find("::{") {
        let module: String =
            rest[..at].chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
        let module: String = module.chars().rev().collect();
        let group = &rest[at + 3..];
        let end = group.find('}').unwrap_or(group.len());
        if group[..end].contains("::{") {
            // An outer group (`crate::{ a::{..}, .. }`): read the inner ones.
            rest = group;
            continue;
        }
        for item in group[..end].split(',') {
            let item = item.trim();
            if !item.is_empty() {
                out.insert(item.to_owned(), module.clone());
            }
        }
        rest = &group[end..];
    }
    out
}

/// Every module `text` refers to outside comments: `crate::<module>`, and
/// `crate::<Item>` or `crate::{<Item>, ..}` for an item re-exported from one.
fn references(
    text: &str,
    modules: &BTreeSet<String>,
    exports: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let word = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let module_of = |name: &str| -> Option<String> {
        if modules.contains(name) { Some(name.to_owned()) } else { exports.get(name).cloned() }
    };
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => {
                    group.split('}').next().unwrap_or("").split(',').map(|n| word(n.trim())).collect()
                }
                None => vec![word(rest)],
            };
            found.extend(names.iter().filter_map(|n| module_of(n)));
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let exports = exports(&fs::read_to_string(src.join("lib.rs")).expect("read lib.rs"));
    let mut edges: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for file in &files {
        let Some(from) = module_of(&src, file) else { continue };
        let text = fs::read_to_string(file).expect("read a source file");
        let to = references(&text, &modules, &exports);
        edges.get_mut(&from).expect("a module").extend(to.into_iter().filter(|m| *m != from));
    }
    edges
}

/// A cycle through `node`, if the graph has one reachable from it.
fn cycle_from(
    node: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_owned());
    for next in &edges[node] {
        if let Some(cycle) = cycle_from(next, edges, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node.to_owned());
    None
}

#[test]
fn the_modules_form_layers_without_cycles() {
    let edges = graph();
    for (from, to) in &edges {
        println!("{from:>10} -> {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    assert!(edges.len() >= 12, "found the modules: {:?}", edges.keys());
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let cycle = cycle_from(node, &edges, &mut Vec::new(), &mut done);
        assert!(cycle.is_none(), "import cycle: {}", cycle.unwrap_or_default().join(" -> "));
    }
    for floor in FLOOR {
        let above: Vec<_> = edges[*floor].iter().filter(|m| !FLOOR.contains(&m.as_str())).collect();
        assert!(above.is_empty(), "the floor module {floor} imports {above:?}");
    }
    assert!(!edges["pool"].contains("breaker") && !edges["breaker"].contains("pool"), "{edges:?}");
    for edge in ["metrics", "http", "server", "config", "testing"] {
        let users: Vec<_> = edges.iter().filter(|(_, to)| to.contains(edge)).map(|(m, _)| m).collect();
        assert!(users.is_empty(), "the edge module {edge} is imported by {users:?}");
    }
}

#[test]
fn the_checker_sees_a_cycle_when_there_is_one() {
    let modules: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let exports = exports("pub use crate::{\n    a::{\n        Alpha,\n        Aleph,\n    }, \n};");
    assert_eq!(exports.get("Aleph").map(String::as_str), Some("a"));
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("a".into(), references("use crate::b::X; // crate::c in a comment", &modules, &exports));
    edges.insert("b".into(), references("fn f() { crate::c::g() }", &modules, &exports));
    edges.insert("c".into(), references("use crate::{Zed, Alpha};", &modules, &exports));
    assert_eq!(edges["a"], ["b".to_owned()].into(), "comments do not count");
    assert_eq!(edges["c"], ["a".to_owned()].into(), "a re-exported item counts as its module");
    let cycle = cycle_from("a", &edges, &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(cycle, Some(["a", "b", "c", "a"].map(String::from).to_vec()));
}
