//! The config's keys, read off the config structs themselves: deserializing a struct with a
//! probe that records what it asks for (its field names, and for each field whether it is a
//! section, a boolean, a number, a string or an array). The environment overrides and their
//! documentation are derived from these keys, so a field added to a struct is overridable
//! and listed without a hand-kept list.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess};

/// What a key holds, as its field's type declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false`.
    Bool,
    /// A whole number.
    Integer,
    /// A number.
    Float,
    /// Text: strings, paths, addresses and names of a fixed set.
    String,
    /// A TOML array of values.
    Array,
    /// A `[section]`.
    Table,
    /// An array of tables (`[[peers]]`): not overridable from the environment.
    TableArray,
}

impl Kind {
    /// How the documentation names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bool => "boolean",
            Self::Integer => "integer",
            Self::Float => "number",
            Self::String => "string",
            Self::Array => "array",
            Self::Table => "table",
            Self::TableArray => "array of tables",
        }
    }
}

/// One key of the config that holds a value (not a section).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// Its `[section]`; `None` at the top level.
    pub section: Option<&'static str>,
    /// Its name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// Whether it may be absent (an `Option`).
    pub optional: bool,
}

impl Key {
    /// `OCELLI_<SECTION>_<KEY>`, upper case.
    pub fn env_var(&self) -> String {
        let mut v = String::from("OCELLI_");
        if let Some(s) = self.section {
            v.push_str(s);
            v.push('_');
        }
        v.push_str(self.name);
        v.make_ascii_uppercase();
        v
    }

    /// `section.key` as the file writes it.
    pub fn dotted(&self) -> String {
        match self.section {
            Some(s) => format!("{s}.{}", self.name),
            None => self.name.to_owned(),
        }
    }
}

/// The value-holding keys of `T` and of its sections, in declaration order; arrays of tables
/// are left out.
pub fn keys<T: DeserializeOwned>() -> Vec<Key> {
    let mut out = Vec::new();
    for &field in trace::<T>(&[]).fields {
        let top = trace::<T>(&[field]);
        match top.kind {
            Some(Kind::Table) => {
                for &name in top.fields {
                    let k = trace::<T>(&[field, name]);
                    if let Some(kind) = k.kind.filter(|k| *k != Kind::TableArray) {
                        out.push(Key {
                            section: Some(field),
                            name,
                            kind,
                            optional: k.optional,
                        });
                    }
                }
            }
            Some(Kind::TableArray) | None => {}
            Some(kind) => out.push(Key {
                section: None,
                name: field,
                kind,
                optional: top.optional,
            }),
        }
    }
    out
}

/// What a probe saw at the end of its path.
#[derive(Debug, Default)]
struct Record {
    fields: &'static [&'static str],
    kind: Option<Kind>,
    optional: bool,
}

/// Deserializes `T` from a probe that follows `path` (one key per struct level) and records
/// what the value there asks for.
fn trace<T: DeserializeOwned>(path: &[&'static str]) -> Record {
    let rec = RefCell::new(Record::default());
    // The probe always ends in an error: it supplies no values, only keys.
    let _ = T::deserialize(Probe {
        path,
        rec: &rec,
        element: false,
    });
    rec.into_inner()
}

/// Ends every probe.
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("schema probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

#[derive(Clone, Copy)]
struct Probe<'a> {
    path: &'a [&'static str],
    rec: &'a RefCell<Record>,
    /// Inside an array: only whether its elements are tables matters.
    element: bool,
}

impl Probe<'_> {
    fn kind<T>(self, kind: Kind) -> Result<T, Stop> {
        if self.path.is_empty() && !self.element {
            self.rec.borrow_mut().kind = Some(kind);
        }
        Err(Stop)
    }
}

macro_rules! scalar {
    ($kind:ident: $($method:ident)*) => {
        $(fn $method<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            self.kind(Kind::$kind)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    scalar!(Bool: deserialize_bool);
    scalar!(Integer: deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_i128
        deserialize_u128);
    scalar!(Float: deserialize_f32 deserialize_f64);
    scalar!(String: deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_any deserialize_identifier deserialize_ignored_any
        deserialize_unit);

    fn deserialize_option<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        if self.path.is_empty() && !self.element {
            self.rec.borrow_mut().optional = true;
        }
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        _: V,
    ) -> Result<V::Value, Stop> {
        self.kind(Kind::String)
    }

    fn deserialize_newtype_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        if !self.path.is_empty() || self.element {
            return Err(Stop);
        }
        self.rec.borrow_mut().kind = Some(Kind::Array);
        visitor.visit_seq(OneElement(Probe {
            element: true,
            ..self
        }))
    }

    fn deserialize_tuple<V: de::Visitor<'de>>(self, _: usize, v: V) -> Result<V::Value, Stop> {
        self.deserialize_seq(v)
    }

    fn deserialize_tuple_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        v: V,
    ) -> Result<V::Value, Stop> {
        self.deserialize_seq(v)
    }

    fn deserialize_map<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        self.kind(Kind::Table)
    }

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        if self.element {
            self.rec.borrow_mut().kind = Some(Kind::TableArray);
            return Err(Stop);
        }
        match self.path.split_first() {
            None => {
                let mut rec = self.rec.borrow_mut();
                rec.kind = Some(Kind::Table);
                rec.fields = fields;
                Err(Stop)
            }
            Some((&key, rest)) => visitor.visit_map(OneKey {
                key: Some(key),
                value: Probe { path: rest, ..self },
            }),
        }
    }

    fn deserialize_enum<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.kind(Kind::String)
    }

    fn is_human_readable(&self) -> bool {
        true
    }
}

/// A struct's map holding only the key the probe follows.
struct OneKey<'a> {
    key: Option<&'static str>,
    value: Probe<'a>,
}

impl<'de> MapAccess<'de> for OneKey<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Stop> {
        seed.deserialize(self.value)
    }
}

/// An array's first element, to see whether its elements are tables.
struct OneElement<'a>(Probe<'a>);

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Stop;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Stop> {
        seed.deserialize(self.0).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u16,
        path: Option<std::path::PathBuf>,
        addr: std::net::SocketAddr,
        list: Vec<usize>,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        on: bool,
        inner: Inner,
        items: Vec<Inner>,
        ratio: f64,
    }

    #[test]
    fn keys_are_read_off_the_structs() {
        let k = |section, name, kind, optional| Key {
            section,
            name,
            kind,
            optional,
        };
        assert_eq!(
            keys::<Outer>(),
            vec![
                k(None, "on", Kind::Bool, false),
                k(Some("inner"), "n", Kind::Integer, false),
                k(Some("inner"), "path", Kind::String, true),
                k(Some("inner"), "addr", Kind::String, false),
                k(Some("inner"), "list", Kind::Array, false),
                k(None, "ratio", Kind::Float, false),
            ]
        );
        assert_eq!(keys::<Outer>()[2].env_var(), "OCELLI_INNER_PATH");
    }
}
