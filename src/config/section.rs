//! [`Config::from_section`]: watertight's configuration as one table of the
//! application's own file, read in place, so that the format's errors point
//! at the user's file (its line numbers, for TOML) and the application's
//! other tables are left alone.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::{Config, ConfigError, from_seed};

impl Config {
    /// Reads the configuration from the table `section` of a larger file
    /// (`"watertight"` for `[watertight.server]`,
    /// `[watertight.dependencies.fraud]`; a dotted name such as
    /// `"tools.watertight"` goes down one table a dot), then checks it as
    /// [`from_deserializer`](Self::from_deserializer) does.
    ///
    /// Any other table is skipped unread; within the section an unknown
    /// field is refused as ever. Paths start at the file's root, and the
    /// format's own messages point into the user's text. A file without the
    /// section is refused, at the section's path (write an empty table for
    /// every default). [`build`](Self::build) names its paths within the
    /// section: prefix them with [`ConfigError::within`].
    ///
    /// ```
    /// use watertight::config::Config;
    ///
    /// let text = r#"
    /// [app]
    /// name = "trips"
    ///
    /// [watertight.dependencies.flights]
    /// workers = 8
    /// timeout = "400ms"
    /// "#;
    /// let config = Config::from_section(toml::Deserializer::parse(text)?, "watertight")?;
    /// assert_eq!(config.dependencies["flights"].workers, 8);
    ///
    /// let bad = text.replace("workers = 8", "workers = \"eight\"");
    /// let err = Config::from_section(toml::Deserializer::parse(&bad)?, "watertight").unwrap_err();
    /// assert_eq!(err.path(), "watertight.dependencies.flights.workers");
    /// assert!(err.message().contains("line 6"), "{err}");
    /// let registry = config.build().map_err(|e| e.within("watertight"))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_section<'de, D: Deserializer<'de>>(
        deserializer: D,
        section: &str,
    ) -> Result<Config, ConfigError> {
        let names: Vec<&str> = section.split('.').collect();
        let found = from_seed(deserializer, Section { names: &names })?;
        let config = found.ok_or_else(|| {
            ConfigError::at(section, "missing: the file has no such table (an empty one takes every default)")
        })?;
        config.validate().map_err(|e| e.within(section))?;
        Ok(config)
    }
}

/// The table at `names` below the current one, if there is one; every
/// other entry is skipped.
struct Section<'a> {
    names: &'a [&'a str],
}

impl<'de> DeserializeSeed<'de> for Section<'_> {
    type Value = Option<Config>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<Config>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Section<'_> {
    type Value = Option<Config>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table holding `{}`", self.names.join("."))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Config>, A::Error> {
        let (first, rest) = self.names.split_first().expect("a section has a name");
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != *first {
                map.next_value::<IgnoredAny>()?;
            } else if rest.is_empty() {
                found = Some(map.next_value::<Config>()?);
            } else {
                found = map.next_value_seed(Section { names: rest })?;
            }
        }
        Ok(found)
    }
}
