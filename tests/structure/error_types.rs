//! The crate's public error types, checked: the types in `src/` that
//! implement `std::error::Error` outside a test module are the call's error,
//! the pool's submit error that hands the job back, the configuration error
//! with its path, the request pool's refusal, and `Rejection`, which is the
//! reason inside the call's error and, alone, a detached call's refusal
//! (`Dependency::spawn`'s `Err`, which a caller passes on with `?`). A
//! reason that is never returned alone (a room's `NoSeat`, a pool's
//! `Refused`) is a value to match on, as `io::ErrorKind` is.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use super::layering::rust_files;

/// The type named by each `impl .. std::error::Error for <Type>` line of
/// `text` before its first `#[cfg(test)]`.
fn error_impls(text: &str) -> Vec<String> {
    let code = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    code.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line.strip_prefix("impl")?;
            let at = rest.find("std::error::Error for ")?;
            let ty = &rest[at + "std::error::Error for ".len()..];
            Some(ty.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        })
        .collect()
}

#[test]
fn the_crate_has_five_public_error_types() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = BTreeSet::new();
    for file in files {
        if file.file_name().is_some_and(|n| n.to_string_lossy().ends_with("tests.rs")) {
            continue;
        }
        let text = fs::read_to_string(&file).expect("read a source file");
        found.extend(error_impls(&text));
    }
    let expected: BTreeSet<String> = ["Error", "SubmitError", "ConfigError", "EnterError", "Rejection"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(found, expected, "the types implementing std::error::Error in src/");
}

#[test]
fn an_impl_is_read_with_its_generics_and_not_from_tests() {
    let text = "impl<E: std::error::Error + 'static> std::error::Error for Error<E> {\n}\n\
                impl std::error::Error for ConfigError {}\n\
                #[cfg(test)]\nmod tests {\n    impl std::error::Error for Refused {}\n}\n";
    assert_eq!(error_impls(text), ["Error", "ConfigError"]);
}
