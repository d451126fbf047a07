//! The call path of one successful `Dependency::call`, as the module docs of
//! `src/dependency/mod.rs` list it, checked against the source: every listed
//! file exists, every listed function is in its file, every file those
//! functions enter is listed, and there are at most 30 files.
//!
//! The list is the ```` ```text ```` block under "# The call path": a line
//! whose first word is a file of `src/` (`pool/submit.rs`) is a step, and
//! the words after it up to a colon name the functions the path runs there
//! (`Pool::submit`, or `submit` for every `fn submit` of the file); other
//! lines are headings. A function is read from its `fn` to its closing
//! brace. A file is entered when such a function names it, through its
//! file's imports or by a path, or reads a field (`inner.throttle`) whose
//! type a struct of a listed file declares in it (`throttle: Throttler`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::layering::FLOOR;

/// The most files one successful call may cross.
const MAX_FILES: usize = 30;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// One step of the list: a file of `src/`, and the functions run there
/// (`Type::name` or `name`).
#[derive(Debug, Clone)]
struct Step {
    file: String,
    functions: Vec<String>,
}

/// The steps listed in the `text` block under `# The call path` of a
/// module's docs.
fn listed(docs: &str) -> Vec<Step> {
    let lines: Vec<&str> = docs.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).collect();
    let start =
        lines.iter().position(|l| l.trim() == "# The call path").expect("a `# The call path` section");
    let open = start + lines[start..].iter().position(|l| l.trim() == "```text").expect("a text block");
    let mut steps = Vec::new();
    for line in &lines[open + 1..] {
        if line.trim() == "```" {
            break;
        }
        let mut words = line.split_whitespace();
        let Some(file) = words.next().filter(|w| w.ends_with(".rs")) else { continue };
        let rest: Vec<&str> = words.collect();
        let rest = rest.join(" ");
        // Up to a lone colon (not one of a `::`).
        let bytes = rest.as_bytes();
        let colon = (0..bytes.len()).find(|&i| {
            bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':')
        });
        // No colon: the line names no function (what it reaches there is
        // told in words).
        let names = colon.map_or("", |c| &rest[..c]);
        let functions = names
            .split(',')
            .map(|n| n.trim().trim_end_matches("()").split_whitespace().next().unwrap_or("").to_owned())
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':'))
            .collect();
        steps.push(Step { file: file.to_owned(), functions });
    }
    steps
}

/// Code without comments, and without an inline `mod tests` (the rest of
/// the file).
fn code(text: &str) -> String {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("mod tests {"))
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// From `text[at..]`, the text up to the brace that closes the first `{`.
fn braced(text: &str, at: usize) -> Option<&str> {
    let open = at + text[at..].find('{')?;
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[at..=open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every `fn name` of `text` (whole words), with its body.
fn functions_named<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!("fn {name}");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(&needle).map(|i| from + i) {
        from = at + needle.len();
        let next = text[from..].chars().next().unwrap_or(' ');
        let before = text[..at].chars().next_back().unwrap_or(' ');
        if !is_word(next) && !is_word(before) {
            out.extend(braced(text, at));
        }
    }
    out
}

/// The bodies of the functions `wanted` names in `text`: `Type::name` is a
/// `fn name` inside an `impl` block of `Type`; a bare `name` any `fn name`.
fn bodies(text: &str, wanted: &str) -> Vec<String> {
    let Some((ty, name)) = wanted.rsplit_once("::") else {
        return functions_named(text, wanted).into_iter().map(str::to_owned).collect();
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("impl").map(|i| from + i) {
        from = at + 4;
        let before = text[..at].chars().next_back().unwrap_or(' ');
        if is_word(before) || text[from..].chars().next().is_some_and(is_word) {
            continue;
        }
        let Some(block) = braced(text, at) else { continue };
        let header = &block[..block.find('{').unwrap_or(0)];
        // `impl<..> Type<..>`, or `impl<..> Trait for Type<..>` (`Trait::f`
        // or `Type::f`).
        let header = header.split(" where").next().unwrap_or(header);
        if header.split(|c: char| !is_word(c)).any(|w| w == ty) {
            out.extend(functions_named(block, name).into_iter().map(str::to_owned));
        }
    }
    out
}

/// The module path of a file of `src/` (`pool/call.rs` -> `pool::call`,
/// `pool/mod.rs` -> `pool`, `lib.rs` -> the crate).
fn module_of(file: &str) -> Vec<String> {
    let file = file.trim_end_matches(".rs");
    let mut path: Vec<String> = file.split('/').map(str::to_owned).collect();
    if path.last().is_some_and(|l| l == "mod" || l == "lib") {
        path.pop();
    }
    path
}

/// The file of a module path, if it has one.
fn file_of(module: &[String]) -> Option<String> {
    if module.is_empty() {
        return Some("lib.rs".to_owned());
    }
    let joined = module.join("/");
    [format!("{joined}.rs"), format!("{joined}/mod.rs")].into_iter().find(|f| src().join(f).is_file())
}

/// Turns `super`, `self` and `crate` at the head of `path` into the module
/// path they stand for in `module` (`is_root`: the file is a `mod.rs` or
/// `lib.rs`, whose `self` is its folder). `None` for a path outside the crate.
fn absolute(path: &[String], module: &[String]) -> Option<Vec<String>> {
    let mut at: Vec<String> = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// The names a file's `use` statements bring in, each with its path
/// (absolute, inside the crate).
fn imports(text: &str, module: &[String]) -> BTreeMap<String, Vec<String>> {
    fn leaves(tree: &str, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut depth = 0;
            let mut part = String::new();
            let mut parts = Vec::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(std::mem::take(&mut part));
                        continue;
                    }
                    _ => {}
                }
                part.push(c);
            }
            parts.push(part);
            let prefix: Vec<String> = prefix.iter().cloned().chain(head).collect();
            for p in parts.iter().filter(|p| !p.trim().is_empty()) {
                leaves(p, &prefix, out);
            }
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim())),
            None => (tree, None),
        };
        let mut full: Vec<String> = prefix.to_vec();
        full.extend(path.split("::").map(str::trim).map(str::to_owned));
        if full.last().is_some_and(|l| l == "self") {
            full.pop();
        }
        let name = alias.map(str::to_owned).or_else(|| full.last().cloned()).unwrap_or_default();
        out.push((name, full));
    }
    let mut out = BTreeMap::new();
    for statement in code(text).split(';') {
        let statement = statement.trim();
        // `use` as a word: not the tail of `must_use` or `in_use`.
        let word = |at: &usize| statement[..*at].chars().last().is_none_or(char::is_whitespace);
        let Some(at) = statement.match_indices("use ").map(|(at, _)| at).find(word) else { continue };
        let head = statement[..at].trim();
        let head = head.rsplit('\n').next().unwrap_or(head).trim();
        if !(head.is_empty() || head.starts_with("pub") || head.starts_with("#[")) {
            continue;
        }
        let mut found = Vec::new();
        leaves(&statement[at + 4..], &[], &mut found);
        for (name, path) in found {
            if let Some(path) = absolute(&path, module) {
                out.insert(name, path);
            }
        }
    }
    out
}

/// The file that defines what `path` (absolute) names, following the
/// re-exports of module roots; `None` outside the crate.
fn defined_in(path: &[String], depth: usize) -> Option<String> {
    if depth > 8 {
        return None;
    }
    // The longest prefix that is a module with a file.
    let (mut module, mut rest) = (Vec::new(), path);
    while let Some((first, tail)) = rest.split_first() {
        let mut next = module.clone();
        next.push(first.clone());
        if file_of(&next).is_none() {
            break;
        }
        module = next;
        rest = tail;
    }
    let file = file_of(&module)?;
    let Some(item) = rest.first() else { return Some(file) };
    let text = fs::read_to_string(src().join(&file)).ok()?;
    match imports(&text, &module).get(item) {
        Some(target) if target.as_slice() != path => {
            let mut target = target.clone();
            target.extend(rest[1..].iter().cloned());
            defined_in(&target, depth + 1).or(Some(file))
        }
        _ => Some(file),
    }
}

/// The files of `src/` that the code `body` of the file `file` names: by a
/// path (`crate::..`, `super::..`, `self::..`), or by a name its file
/// imports.
fn named_by(body: &str, file: &str) -> BTreeSet<String> {
    let module = module_of(file);
    let text = fs::read_to_string(src().join(file)).expect("a listed file");
    let imported = imports(&text, &module);
    let mut found = BTreeSet::new();
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !is_word(chars[i]) || (i > 0 && (is_word(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        // A path: words joined by `::`.
        let mut path = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < chars.len() && is_word(chars[j]) {
                j += 1;
            }
            path.push(chars[start..j].iter().collect::<String>());
            if j + 2 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' && is_word(chars[j + 2]) {
                j += 2;
            } else {
                break;
            }
        }
        i = j;
        let absolute_path = match path[0].as_str() {
            "crate" | "super" | "self" if path.len() > 1 => absolute(&path, &module),
            first => {
                imported.get(first).map(|p| p.iter().cloned().chain(path[1..].iter().cloned()).collect())
            }
        };
        if let Some(target) = absolute_path.and_then(|p| defined_in(&p, 0)) {
            found.insert(target);
        }
    }
    found.remove(file);
    found.remove("lib.rs");
    // The floor is read everywhere and not counted; a test module's hooks
    // (`#[cfg(test)]` counters) are no part of the path.
    found.retain(|f| !is_floor(f) && !f.trim_end_matches(".rs").ends_with("tests"));
    found
}

/// The fields of the structs of `file`: each field's name, with its type
/// as written (`throttle: Option<Arc<Throttler>>`).
fn fields(file: &str) -> Vec<(String, String)> {
    let Ok(text) = fs::read_to_string(src().join(file)) else { return Vec::new() };
    let text = code(&text);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("struct ").map(|i| from + i) {
        from = at + 7;
        if text[..at].chars().next_back().is_some_and(is_word) {
            continue;
        }
        let Some(block) = braced(&text, at) else { continue };
        let head = &block[..block.find('{').unwrap_or(0)];
        if head.contains(';') || head.contains('(') {
            continue; // a unit or tuple struct: its braces are another item's
        }
        for line in block[head.len() + 1..].lines() {
            let line = line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ");
            let line = line.trim_start_matches("pub ");
            if let Some((name, ty)) = line.split_once(':')
                && !name.is_empty()
                && name.chars().all(is_word)
                && !ty.starts_with(':')
            {
                out.push((name.to_owned(), ty.trim().trim_end_matches(',').to_owned()));
            }
        }
    }
    out
}

/// The files of `src/` that `body` enters through a method of a value it
/// holds (`inner.throttle.refuses()`): for each field it reads
/// (`.throttle`), the type that a struct of a listed file gives a field of
/// that name, read through that file's imports. A field name that two
/// structs share counts for both.
fn held_by(body: &str, listed: &BTreeSet<String>) -> BTreeSet<String> {
    let mut read = BTreeSet::new();
    let chars: Vec<char> = body.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c != '.' || chars.get(i + 1).is_none_or(|c| !(c.is_lowercase() || *c == '_')) {
            continue;
        }
        let end = (i + 1..chars.len()).find(|&j| !is_word(chars[j])).unwrap_or(chars.len());
        if chars.get(end) != Some(&'(') && chars.get(end) != Some(&':') {
            read.insert(chars[i + 1..end].iter().collect::<String>());
        }
    }
    let mut found = BTreeSet::new();
    for file in listed {
        for (name, ty) in fields(file) {
            if read.contains(&name) {
                found.extend(named_by(&ty, file));
            }
        }
    }
    found
}

/// Whether `file` is of the floor (`layering.rs`'s `FLOOR`): vocabulary and
/// helpers every layer reads, not counted as a step of the path.
fn is_floor(file: &str) -> bool {
    module_of(file).first().is_some_and(|m| FLOOR.contains(&m.as_str()))
}

/// What is wrong with `steps` as the call path: missing files, functions
/// not found, files the path names that are not listed, too many files.
fn problems(steps: &[Step]) -> Vec<String> {
    let mut out = Vec::new();
    let files: BTreeSet<String> = steps.iter().map(|s| s.file.clone()).collect();
    for floor in files.iter().filter(|f| is_floor(f)) {
        out.push(format!("{floor} is of the floor, which the list does not count"));
    }
    if files.len() > MAX_FILES {
        out.push(format!("{} files, more than {MAX_FILES}: {files:?}", files.len()));
    }
    for step in steps {
        let Ok(text) = fs::read_to_string(src().join(&step.file)) else {
            out.push(format!("{} is not a file of src/", step.file));
            continue;
        };
        let text = code(&text);
        for function in &step.functions {
            let found = bodies(&text, function);
            if found.is_empty() {
                out.push(format!("{}: no `fn` for {function}", step.file));
            }
            for body in found {
                for used in named_by(&body, &step.file).into_iter().chain(held_by(&body, &files)) {
                    if !files.contains(&used) {
                        out.push(format!("{} {function} uses {used}, which is not listed", step.file));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn the_list() -> Vec<Step> {
    listed(&fs::read_to_string(src().join("dependency/mod.rs")).expect("read dependency/mod.rs"))
}

#[test]
fn the_listed_call_path_is_the_one_the_code_takes() {
    let steps = the_list();
    for step in &steps {
        println!("{:<24} {}", step.file, step.functions.join(", "));
    }
    assert_eq!(steps.first().map(|s| s.file.as_str()), Some("dependency/mod.rs"), "it starts at the call");
    assert!(steps[0].functions.iter().any(|f| f == "Dependency::call"), "{:?}", steps[0]);
    let problems = problems(&steps);
    assert!(
        problems.is_empty(),
        "the call path in src/dependency/mod.rs is not the code's:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_fails_on_a_bad_list() {
    let good = the_list();
    assert!(problems(&good).is_empty());
    // A file the path takes, left out: whoever names it is caught.
    let left_out: Vec<Step> = good.iter().filter(|s| s.file != "pool/submit.rs").cloned().collect();
    let found = problems(&left_out);
    assert!(found.iter().any(|p| p.ends_with("uses pool/submit.rs, which is not listed")), "{found:?}");
    // A file the path enters only through a field it reads (`self.throttle`).
    let left_out: Vec<Step> = good.iter().filter(|s| s.file != "limit/throttle.rs").cloned().collect();
    let found = problems(&left_out);
    assert!(found.iter().any(|p| p.ends_with("uses limit/throttle.rs, which is not listed")), "{found:?}");
    // A file that does not exist, and a function its file does not have.
    let mut wrong = good.clone();
    wrong.push(Step { file: "pool/nowhere.rs".into(), functions: vec![] });
    wrong[0].functions.push("Dependency::no_such_call".into());
    let found = problems(&wrong);
    assert!(found.contains(&"pool/nowhere.rs is not a file of src/".to_owned()), "{found:?}");
    assert!(
        found.contains(&"dependency/mod.rs: no `fn` for Dependency::no_such_call".to_owned()),
        "{found:?}"
    );
    // Too many files.
    let mut long = good;
    long.extend((0..=MAX_FILES).map(|i| Step { file: format!("extra{i}.rs"), functions: vec![] }));
    assert!(problems(&long).iter().any(|p| p.contains(&format!("more than {MAX_FILES}"))));
}

#[test]
fn the_reader_finds_functions_imports_and_paths() {
    let text = "use super::queue::{Letter, Mailbox as Box2};\nuse crate::{error::Error, pool::Pool};\n\
                impl Pool { fn submit(&self) { let x = Box2::new(); crate::time::now(); } }\n\
                impl Other { fn submit(&self) { Error::x() } }\nfn submit_all() {}";
    let module = module_of("pool/submit.rs");
    let imported = imports(text, &module);
    assert_eq!(imported["Box2"], ["pool", "queue", "Mailbox"].map(String::from));
    assert_eq!(imported["Error"], ["error", "Error"].map(String::from));
    let pool_submit = bodies(text, "Pool::submit");
    assert_eq!(pool_submit.len(), 1, "only Pool's submit");
    assert!(pool_submit[0].contains("Box2::new") && !pool_submit[0].contains("Error"));
    assert_eq!(bodies(text, "submit").len(), 2, "every fn submit, not submit_all");
    assert_eq!(defined_in(&["pool".into(), "Pool".into()], 0).as_deref(), Some("pool/mod.rs"));
    assert_eq!(defined_in(&["pool".into(), "CallContext".into()], 0).as_deref(), Some("pool/call.rs"));
    assert_eq!(defined_in(&["Dependency".into()], 0).as_deref(), Some("dependency/mod.rs"));
}
