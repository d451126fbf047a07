//! A file's section read in place: paths from the file's root, the format's
//! line numbers in the user's file, the application's tables left alone.
#![cfg(feature = "serde")]

use watertight::ConfigError;
use watertight::config::Config;
use watertight::dependency::CallShape;

fn from_toml(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| ConfigError::at("", e.to_string()))?;
    Config::from_deserializer(de)
}

/// The application's file, with watertight's section among its own tables.
const APP: &str = r#"# trips.toml
[app]
name = "trips"
listen = "0.0.0.0:8080"
colour = "blue"

[watertight.server]
request_threads = 32

[watertight.dependencies.flights]
workers = 8
queue = 2
timeout = "400ms"

[watertight.dependencies.audit]
workers = 2
queue = 64
calls = "detached"

[database]
pool = 4
"#;

fn section(text: &str, name: &str) -> Result<Config, ConfigError> {
    Config::from_section(toml::Deserializer::parse(text).unwrap(), name)
}

#[test]
fn a_section_of_the_applications_file_is_read_in_place() {
    let config = section(APP, "watertight").unwrap();
    assert_eq!(config.server.request_threads, Some(32));
    assert_eq!(config.dependencies["flights"].workers, 8);
    assert_eq!(config.dependencies["audit"].calls, CallShape::Detached);
    assert_eq!(config.build().unwrap().dependencies().len(), 2);
    // Down a dotted path.
    let nested = APP.replace("[watertight.", "[tools.watertight.");
    assert_eq!(section(&nested, "tools.watertight").unwrap(), config);
}

#[test]
fn an_error_in_the_section_names_the_line_of_the_whole_file() {
    // Line 12 of the application's file (`queue = 2` under flights).
    assert_eq!(APP.lines().nth(11), Some("queue = 2"));
    let cases = [
        ("queue = 2\n", "queue = \"two\"\n", "watertight.dependencies.flights.queue", "invalid type"),
        ("queue = 2\n", "queeu = 2\n", "watertight.dependencies.flights.queeu", "unknown field `queeu`"),
        ("queue = 2\n", "queue = 2\nbreaker = { window = { sliding = 2 } }\n", "", "unknown variant"),
    ];
    for (from, to, path, words) in cases {
        let text = APP.replacen(from, to, 1);
        let err = section(&text, "watertight").expect_err(to);
        if !path.is_empty() {
            assert_eq!(err.path(), path, "{err}");
        }
        assert!(err.message().contains(words), "{err}");
        let line = if to.starts_with("queue = 2\nbreaker") { 13 } else { 12 };
        assert!(err.message().contains(&format!("line {line}")), "line {line} of the whole file: {err}");
    }
    // A value the rules refuse: its path from the file's root.
    let err = section(&APP.replace("workers = 8", "workers = 0"), "watertight")
        .and_then(|c| c.build().map_err(|e| e.within("watertight")).map(drop))
        .unwrap_err();
    assert_eq!(err.path(), "watertight.dependencies.flights.workers", "{err}");
    let err = section(&APP.replace("request_threads = 32", "request_threads = 0"), "watertight").unwrap_err();
    assert_eq!(err.path(), "watertight.server.request_threads", "{err}");
}

#[test]
fn the_applications_tables_are_left_alone_and_a_missing_section_is_named() {
    // `colour` and `[database]` are not watertight's: nobody refuses them.
    assert!(section(APP, "watertight").is_ok());
    let err = section(APP, "bulkheads").unwrap_err();
    assert_eq!(err.path(), "bulkheads");
    assert!(err.message().contains("missing"), "{err}");
    let err = section(&APP.replace("[watertight.server]", "[watertight.servers]"), "watertight").unwrap_err();
    assert_eq!(err.path(), "watertight.servers", "{err}");
    // The whole file read as watertight's own is refused at the first foreign table.
    let err = from_toml(APP).unwrap_err();
    assert_eq!(err.path(), "app", "{err}");
}

#[test]
fn any_format_with_paths_from_its_root() {
    let text = r#"{"app": {"anything": [1, 2]}, "watertight": {"dependencies": {"fraud": {"queue": -1}}}}"#;
    let err = Config::from_section(&mut serde_json::Deserializer::from_str(text), "watertight").unwrap_err();
    assert_eq!(err.path(), "watertight.dependencies.fraud.queue", "{err}");
    assert!(err.message().contains("column"), "JSON's own place in the text: {err}");
    let ok = r#"{"app": {}, "watertight": {"dependencies": {"fraud": {"workers": 3}}}}"#;
    let config = Config::from_section(&mut serde_json::Deserializer::from_str(ok), "watertight").unwrap();
    assert_eq!(config.dependencies["fraud"].workers, 3);
    // A section that is not a table is named as such.
    let err = section("watertight = 3\n", "watertight").unwrap_err();
    assert_eq!(err.path(), "watertight", "{err}");
}
