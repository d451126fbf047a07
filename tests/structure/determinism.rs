//! The suite draws the same cases on every run: a property test that drew a
//! new case each run could draw, on any run, one that hangs or fails, and a
//! CI run would then judge the draw, not the change.
//!
//! Every `proptest!` block in `src/` and `tests/` sets its own
//! `proptest_config` with a fixed `rng_seed`. (`PROPTEST_RNG_SEED` in the
//! environment still overrides it, to explore other draws by hand.)

use std::fs;
use std::path::Path;

use super::layering::rust_files;

#[test]
fn every_property_test_draws_from_a_fixed_seed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let mut blocks = 0;
    let mut unseeded = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("read a source file");
        for (at, _) in text.match_indices(concat!("proptest!", " {")) {
            blocks += 1;
            // The block's config is its first inner attribute, on the next lines.
            let head: String = text[at..].lines().take(3).collect::<Vec<_>>().join("\n");
            if !(head.contains("proptest_config") && head.contains("RngSeed::Fixed")) {
                let line = text[..at].lines().count() + 1;
                unseeded.push(format!("{}:{line}", file.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(blocks >= 5, "found only {blocks} proptest! blocks: is the scan still reading the sources?");
    assert!(unseeded.is_empty(), "property tests without a fixed rng_seed: {unseeded:?}");
}
