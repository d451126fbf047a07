//! The crate's layers, checked: which top-level module of `src/` refers to
//! which, read from the source text (`crate::<module>` paths outside
//! comments), must form a graph without cycles, with the floor importing
//! nothing above it and the pool and the breaker never importing each other;
//! and so must the files of each folder (below).
//!
//! Run with `--nocapture` to print the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floor: modules every layer may use, which use no layer themselves.
pub(crate) const FLOOR: &[&str] = &[
    "classify",
    "clock",
    "error",
    "histogram",
    "latency",
    "listeners",
    "priority",
    "room",
    "shadow",
    "sync",
    "time",
    "window",
];

/// Every `.rs` file below `dir`.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read the directory") {
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
    // The file config sits above every part it configures, the server's
    // reserve included; no other module imports an edge.
    for edge in ["metrics", "http", "server", "config", "testing"] {
        let users: Vec<_> = edges
            .iter()
            .filter(|(from, to)| to.contains(edge) && !(edge == "server" && from.as_str() == "config"))
            .map(|(m, _)| m)
            .collect();
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

// The files of one folder: which file of `src/<folder>/` uses which other,
// read from `super::<file>`, `crate::<folder>::<file>` and items the
// folder's root (`mod.rs`, or `src/<folder>.rs`) re-exports from a file,
// reached as `super::<Item>`, `crate::<folder>::<Item>` or, re-exported again
// by `lib.rs`, `crate::<Item>`. The root itself, which declares every file,
// is not a node, nor is a test module (`tests.rs`, `*_tests.rs`); an inline
// `mod tests` (the rest of a file) is not read.

/// Rust code of `text`, line by line: comments cut off, and nothing from an
/// inline `mod tests {` on, whose `super` is the file itself.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("mod tests {"))
        .map(|l| l.split("//").next().unwrap_or(""))
}

fn word(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// What a folder's root re-exports from its files: item name (as it is
/// known there, `as` renames included) -> file.
fn reexports(root: &str, folder: &str, files: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code: String = code_lines(root).collect::<Vec<_>>().join("\n");
    let mut out = BTreeMap::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("use ") else { continue };
        let head = statement[..at].trim();
        if !(head.is_empty() || head.starts_with("pub")) || head.contains('{') || head.contains('}') {
            continue;
        }
        let crate_folder = format!("crate::{folder}::");
        let path = statement[at + 4..].trim();
        let path =
            path.strip_prefix("self::").or_else(|| path.strip_prefix(crate_folder.as_str())).unwrap_or(path);
        let file = word(path);
        if !files.contains(&file) {
            continue;
        }
        let rest = &path[file.len()..];
        let names: Vec<&str> = match (rest.find('{'), rest.rfind('}')) {
            (Some(open), Some(close)) => rest[open + 1..close].split(',').collect(),
            _ => vec![rest],
        };
        for name in names {
            let name = name.trim();
            let known_as = match name.rsplit_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => name.rsplit("::").next().unwrap_or(name),
            };
            let known_as = word(known_as);
            if !known_as.is_empty() && known_as != "self" {
                out.insert(known_as, file.clone());
            }
        }
    }
    out
}

/// The names after `prefix` at the start of `rest`: one, or a `{..}` group's.
fn names_after(rest: &str) -> Vec<String> {
    match rest.strip_prefix('{') {
        Some(group) => group.split('}').next().unwrap_or("").split(',').map(|n| word(n.trim())).collect(),
        None => vec![word(rest)],
    }
}

/// The files of `folder` a file of it refers to (the caller drops the file
/// itself).
fn folder_references(
    text: &str,
    folder: &str,
    files: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
    exports: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let file_of = |name: &str| -> Option<String> {
        if files.contains(name) { Some(name.to_owned()) } else { reexports.get(name).cloned() }
    };
    let crate_folder = format!("crate::{folder}::");
    let mut found = BTreeSet::new();
    for code in code_lines(text) {
        for prefix in ["super::", crate_folder.as_str()] {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                // `super::super::` and `crate::x::super::` are not this folder.
                rest = &rest[at + prefix.len()..];
                found.extend(names_after(rest).iter().filter_map(|n| file_of(n)));
            }
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let items = names_after(rest);
            found.extend(
                items
                    .iter()
                    .filter(|n| exports.get(*n).is_some_and(|m| m == folder))
                    .filter_map(|n| file_of(n)),
            );
        }
    }
    found
}

/// For each folder of `src/`: its files (stems), each with the files of the
/// same folder it uses.
fn folder_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = exports(&fs::read_to_string(src.join("lib.rs")).expect("read lib.rs"));
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(&src).expect("read src/") {
        let dir = entry.expect("a directory entry").path();
        if !dir.is_dir() {
            continue;
        }
        let folder = dir.file_name().and_then(|n| n.to_str()).expect("a folder name").to_owned();
        let root_file =
            if dir.join("mod.rs").exists() { dir.join("mod.rs") } else { src.join(format!("{folder}.rs")) };
        let mut paths = Vec::new();
        rust_files(&dir, &mut paths);
        let stem = |p: &PathBuf| p.file_stem().and_then(|s| s.to_str()).expect("a file name").to_owned();
        // Test modules are no part of the shape: a file's test-only hooks
        // into them (`#[cfg(test)]` counters) are no import.
        paths.retain(|p| *p != root_file && !stem(p).ends_with("tests"));
        let files: BTreeSet<String> = paths.iter().map(stem).collect();
        let root = fs::read_to_string(&root_file).expect("read a folder's root");
        let reexports = reexports(&root, &folder, &files);
        let mut edges = BTreeMap::new();
        for path in &paths {
            let text = fs::read_to_string(path).expect("read a source file");
            let mut to = folder_references(&text, &folder, &files, &reexports, &exports);
            to.remove(&stem(path));
            edges.insert(stem(path), to);
        }
        out.insert(folder, edges);
    }
    out
}

/// The circles of `edges`: each set of two or more nodes that all reach
/// each other (its strongly connected components), once each.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<BTreeSet<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut next: Vec<&String> = edges[from].iter().collect();
        while let Some(n) = next.pop() {
            if seen.insert(n.clone()) {
                next.extend(edges.get(n).into_iter().flatten());
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|n| (n, reach(n))).collect();
    edges
        .keys()
        .filter(|n| reaches[n].contains(*n))
        .map(|n| {
            reaches[n].iter().filter(|m| reaches.get(m).is_some_and(|r| r.contains(n))).cloned().collect()
        })
        .collect()
}

#[test]
fn the_files_of_each_folder_use_each_other_without_cycles() {
    let graphs = folder_graphs();
    assert!(graphs.len() >= 10 && graphs["dependency"].len() >= 10, "found the folders: {:?}", graphs.keys());
    assert!(graphs["dependency"]["once"].contains("attempt"), "{:?}", graphs["dependency"]);
    let mut cycles = Vec::new();
    for (folder, edges) in &graphs {
        for (from, to) in edges {
            println!("{folder:>10}/{from:<12} -> {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
        }
        for circle in circles(edges) {
            cycles.push(format!("{folder}/{{{}}}", circle.into_iter().collect::<Vec<_>>().join(", ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles between the files of a folder: {cycles:?}");
}

#[test]
fn the_folder_checker_sees_a_cycle_when_there_is_one() {
    let files: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let root = "mod a;\nmod b;\npub use self::b::{Beta, Bet as Bee};\npub(crate) use c::Gamma;\n\
                // pub use self::d::Delta;\nuse crate::other::Thing;";
    let reexports = reexports(root, "f", &files);
    let expected: BTreeMap<String, String> =
        [("Beta", "b"), ("Bee", "b"), ("Gamma", "c")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    assert_eq!(reexports, expected, "renames count; comments and other modules do not");
    let lib_exports: BTreeMap<String, String> = [("Gamma".to_owned(), "f".to_owned())].into();
    let refs = |text: &str| folder_references(text, "f", &files, &reexports, &lib_exports);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("a".into(), refs("use super::Bee; // super::d::x in a comment"));
    edges.insert("b".into(), refs("fn g() -> crate::Gamma { todo!() }"));
    edges.insert("c".into(), refs("use crate::f::{a::Alpha, Outside};"));
    edges.insert("d".into(), refs("fn x() {}\n#[cfg(test)]\nmod tests {\n    use super::a::Alpha;\n}"));
    assert_eq!(edges["a"], ["b".to_owned()].into(), "a re-export counts as its file; comments do not");
    assert_eq!(edges["b"], ["c".to_owned()].into(), "an item lib.rs re-exports counts as its file");
    assert_eq!(edges["c"], ["a".to_owned()].into(), "crate::<folder>:: is the folder");
    assert!(edges["d"].is_empty(), "an inline test module's super is the file itself");
    let cycle = cycle_from("a", &edges, &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(cycle, Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    let both: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    assert_eq!(circles(&edges), [both].into(), "one circle, named once");
    edges.get_mut("c").expect("c").clear();
    assert!(circles(&edges).is_empty());
    assert_eq!(cycle_from("a", &edges, &mut Vec::new(), &mut BTreeSet::new()), None, "a line is no cycle");
}
