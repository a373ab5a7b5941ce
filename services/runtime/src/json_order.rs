//! The order a JSON text writes its object keys in. The fleet's JSON maps keep keys sorted
//! (serde_json without `preserve_order`: turning that on for the workspace would change the
//! bytes of every payload we build); 0.3.5's dicts keep the order the model wrote, which shows
//! where that order is visible, such as the order of a tool call's validation errors.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The key order of a JSON value: an object's keys as written (each with its value's order),
/// an array's items, or nothing for a scalar.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KeyOrder {
    /// A scalar, or a value whose text was not read.
    #[default]
    Leaf,
    /// An object: its keys in the order written (a repeated key keeps its first place).
    Object(Vec<(String, KeyOrder)>),
    /// An array: its items' orders.
    Array(Vec<KeyOrder>),
}

impl KeyOrder {
    /// Reads the key order of the JSON text `text`; a JSON string holding a JSON object or
    /// array is read once more (as tool arguments are). [`KeyOrder::Leaf`] when it is not JSON.
    pub fn of(text: &str) -> Self {
        let order = serde_json::from_str::<Self>(text.trim()).unwrap_or_default();
        if order != Self::Leaf {
            return order;
        }
        match serde_json::from_str::<String>(text.trim()) {
            Ok(inner) => serde_json::from_str(inner.trim()).unwrap_or_default(),
            Err(_) => Self::Leaf,
        }
    }

    /// Returns the members of `map` in this order: the keys written, then any other key of
    /// `map` (sorted), each with its value's order.
    pub fn members<'a>(
        &'a self,
        map: &'a Map<String, Value>,
    ) -> Vec<(&'a str, &'a Value, &'a Self)> {
        static LEAF: KeyOrder = KeyOrder::Leaf;
        let written: &[(String, Self)] = match self {
            Self::Object(keys) => keys,
            _ => &[],
        };
        let mut out: Vec<(&str, &Value, &Self)> = written
            .iter()
            .filter_map(|(k, o)| map.get_key_value(k).map(|(k, v)| (k.as_str(), v, o)))
            .collect();
        for (k, v) in map {
            if !written.iter().any(|(w, _)| w == k) {
                out.push((k, v, &LEAF));
            }
        }
        out
    }

    /// Returns the order of an object's member `key`.
    pub fn get(&self, key: &str) -> &Self {
        static LEAF: KeyOrder = KeyOrder::Leaf;
        match self {
            Self::Object(keys) => keys
                .iter()
                .find(|(k, _)| k == key)
                .map_or(&LEAF, |(_, o)| o),
            _ => &LEAF,
        }
    }

    /// Returns `value` as compact JSON text with its keys in this order.
    pub fn write(&self, value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let members: Vec<String> = self
                    .members(map)
                    .into_iter()
                    .map(|(k, v, o)| format!("{}:{}", Value::String(k.into()), o.write(v)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }
            Value::Array(items) => {
                let items: Vec<String> = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.item(i).write(v))
                    .collect();
                format!("[{}]", items.join(","))
            }
            other => other.to_string(),
        }
    }

    /// Returns the order of item `i` of an array.
    pub fn item(&self, i: usize) -> &Self {
        static LEAF: KeyOrder = KeyOrder::Leaf;
        match self {
            Self::Array(items) => items.get(i).unwrap_or(&LEAF),
            _ => &LEAF,
        }
    }
}

impl<'de> Deserialize<'de> for KeyOrder {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Orders;
        impl<'de> Visitor<'de> for Orders {
            type Value = KeyOrder;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyOrder, A::Error> {
                let mut keys: Vec<(String, KeyOrder)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, KeyOrder>()? {
                    match keys.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = v,
                        None => keys.push((k, v)),
                    }
                }
                Ok(KeyOrder::Object(keys))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyOrder, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<KeyOrder>()? {
                    items.push(item);
                }
                Ok(KeyOrder::Array(items))
            }
            fn visit_bool<E>(self, _: bool) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_unit<E>(self) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_none<E>(self) -> Result<KeyOrder, E> {
                Ok(KeyOrder::Leaf)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<KeyOrder, D2::Error> {
                IgnoredAny::deserialize(d).map(|_| KeyOrder::Leaf)
            }
        }
        d.deserialize_any(Orders)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keys(order: &KeyOrder, value: &Value) -> Vec<String> {
        order
            .members(value.as_object().unwrap())
            .into_iter()
            .map(|(k, _, _)| k.to_string())
            .collect()
    }

    #[test]
    fn keys_come_back_in_the_order_written_nested_and_double_encoded() {
        let text = r#"{"z": 1, "路径": {"b": 2, "a": [{"y": 0, "x": 0}]}, "m": null}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let order = KeyOrder::of(text);
        assert_eq!(keys(&order, &value), ["z", "路径", "m"]);
        let (_, inner, inner_order) = order.members(value.as_object().unwrap())[1];
        assert_eq!(keys(inner_order, inner), ["b", "a"]);
        let item = &inner["a"][0];
        let (_, _, a_order) = inner_order.members(inner.as_object().unwrap())[1];
        assert_eq!(keys(a_order.item(0), item), ["y", "x"]);
        assert_eq!(
            order.write(&value),
            r#"{"z":1,"路径":{"b":2,"a":[{"y":0,"x":0}]},"m":null}"#
        );
        assert_eq!(order.get("路径").get("a").item(0), a_order.item(0));
        let encoded = serde_json::to_string(text).unwrap();
        assert_eq!(keys(&KeyOrder::of(&encoded), &value), ["z", "路径", "m"]);
    }

    #[test]
    fn keys_not_written_follow_sorted_and_unreadable_text_keeps_the_map_order() {
        let value = json!({"b": 1, "a": 2, "c": 3});
        assert_eq!(keys(&KeyOrder::of(r#"{"c": 0}"#), &value), ["c", "a", "b"]);
        assert_eq!(keys(&KeyOrder::of("not json"), &value), ["a", "b", "c"]);
    }
}
