//! Integer fields that accept whole-number floats.
//!
//! JSON Schema (and so the OpenAPI document, and the tools that generate
//! requests from it) counts `1283.0` as an integer; serde does not. These
//! `deserialize_with` functions accept any JSON number that is a whole
//! number in the field's range, and refuse fractions and out-of-range
//! values with serde's usual "invalid value" error. `null` in an optional
//! field is the same as leaving the field out.

use std::{fmt, marker::PhantomData};

use serde::{
    de::{self, Visitor},
    Deserializer,
};

/// An integer type these visitors produce.
trait Whole: Sized + TryFrom<u64> + TryFrom<i64> {
    const EXPECTING: &'static str;
}

impl Whole for u64 {
    const EXPECTING: &'static str = "an unsigned integer";
}
impl Whole for u32 {
    const EXPECTING: &'static str = "an unsigned 32-bit integer";
}
impl Whole for i32 {
    const EXPECTING: &'static str = "a signed 32-bit integer";
}

struct WholeVisitor<T>(PhantomData<T>);

impl<'de, T: Whole> Visitor<'de> for WholeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // 2^64: every whole f64 below it (and at or above -2^63) converts
        // exactly.
        const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
        let converted = if !v.is_finite() || v.fract() != 0.0 {
            None
        } else if (0.0..TWO_POW_64).contains(&v) {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            T::try_from(v as u64).ok()
        } else if (i64::MIN as f64..0.0).contains(&v) {
            #[allow(clippy::cast_possible_truncation)]
            T::try_from(v as i64).ok()
        } else {
            None
        };
        converted.ok_or_else(|| E::invalid_value(de::Unexpected::Float(v), &self))
    }
}

struct OptionVisitor<T>(PhantomData<T>);

impl<'de, T: Whole> Visitor<'de> for OptionVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} or null", T::EXPECTING)
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(WholeVisitor(PhantomData)).map(Some)
    }
}

fn whole<'de, D: Deserializer<'de>, T: Whole>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(WholeVisitor(PhantomData))
}

fn optional<'de, D: Deserializer<'de>, T: Whole>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_option(OptionVisitor(PhantomData))
}

pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole(d)
}

pub(crate) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    whole(d)
}

pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    optional(d)
}

pub(crate) fn opt_i32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    optional(d)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    struct Probe {
        #[serde(deserialize_with = "super::u64")]
        n: u64,
        #[serde(default, deserialize_with = "super::opt_i32")]
        p: Option<i32>,
        #[serde(default, deserialize_with = "super::u32")]
        s: u32,
    }

    fn parse(json: &str) -> Result<Probe, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_floats_are_integers() {
        let p = parse(r#"{"n": 1283.0, "p": -5.0, "s": 7.0}"#).unwrap();
        assert_eq!((p.n, p.p, p.s), (1283, Some(-5), 7));
        assert_eq!(parse(r#"{"n": 1e3}"#).unwrap().n, 1000);
        assert_eq!(parse(r#"{"n": 18446744073709551615}"#).unwrap().n, u64::MAX);
    }

    #[test]
    fn fractions_and_out_of_range_are_refused() {
        for bad in [
            r#"{"n": 1.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": -1.0}"#,
            r#"{"n": 1e20}"#,
            r#"{"n": "1"}"#,
            r#"{"n": null}"#,
            r#"{"n": 1, "p": 2147483648}"#,
            r#"{"n": 1, "s": 4294967296.0}"#,
            r#"{"n": 1, "p": true}"#,
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("invalid"), "{bad}: {err}");
        }
    }

    #[test]
    fn null_is_absent() {
        assert_eq!(parse(r#"{"n": 1, "p": null}"#).unwrap().p, None);
        assert_eq!(parse(r#"{"n": 1}"#).unwrap().p, None);
    }
}
