//! A JSON value that keeps its objects' keys in document order: upstream re-dumps a fetched
//! JSON body (`json.dumps(r.json(), indent=2)`), and Python's dicts keep the order the
//! server sent, where `serde_json::Value` (without `preserve_order`, which would change every
//! crate of the workspace) sorts them.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

/// A parsed JSON document, objects in document order (a repeated key keeps its first place
/// and its last value, as Python's `json.loads`).
#[derive(Debug, Clone, PartialEq)]
pub enum Ordered {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Ordered>),
    /// An object, keys in document order.
    Object(Vec<(String, Ordered)>),
}

/// Returns `body` pretty-printed with two-space indents, keys in document order; `None` when
/// it is not JSON.
pub fn pretty(body: &str) -> Option<String> {
    let value: Ordered = serde_json::from_str(body).ok()?;
    serde_json::to_string_pretty(&value).ok()
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => serializer.serialize_unit(),
            Self::Bool(b) => serializer.serialize_bool(*b),
            Self::Number(n) => n.serialize(serializer),
            Self::String(s) => serializer.serialize_str(s),
            Self::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Self::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

struct OrderedVisitor;

impl<'de> Visitor<'de> for OrderedVisitor {
    type Value = Ordered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Ordered, E> {
        Ok(Ordered::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Ordered, E> {
        Ok(Ordered::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Ordered, E> {
        Ok(Ordered::Number(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Ordered, E> {
        Ok(Ordered::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Ordered, E> {
        Number::from_f64(n)
            .map(Ordered::Number)
            .ok_or_else(|| E::custom("a non-finite number"))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Ordered, E> {
        Ok(Ordered::String(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Ordered, E> {
        Ok(Ordered::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Ordered::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
        let mut entries: Vec<(String, Ordered)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Ordered>()? {
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => entries.push((key, value)),
            }
        }
        Ok(Ordered::Object(entries))
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(OrderedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_keeps_the_servers_key_order_as_upstreams_json_dumps() {
        // nanobot 0.3.5: json.dumps(json.loads(body), indent=2, ensure_ascii=False).
        let body = r#"{"zeta":1,"名字":"笔记 📔","alpha":{"y":[true,null],"x":1.5},"flag":"🇨🇳","rtl":"שלום عربى","e":"e\u0301","zeta":2}"#;
        assert_eq!(
            pretty(body).unwrap(),
            "{\n  \"zeta\": 2,\n  \"名字\": \"笔记 📔\",\n  \"alpha\": {\n    \"y\": [\n      true,\n      null\n    ],\n    \"x\": 1.5\n  },\n  \"flag\": \"🇨🇳\",\n  \"rtl\": \"שלום عربى\",\n  \"e\": \"e\u{301}\"\n}"
        );
        assert_eq!(pretty("[]").unwrap(), "[]");
        assert_eq!(pretty("{}").unwrap(), "{}");
        assert_eq!(pretty("{broken"), None);
    }
}
