//! Collations: locale-aware string comparison for filters, `$expr`
//! comparisons and sorts, from a command's `collation` document, with the
//! Unicode Collation Algorithm and CLDR's locale rules (ICU4X's
//! `icu_collator`, MongoDB uses ICU). `{locale: "simple"}` (or none) is
//! binary comparison.
//!
//! Strings compare through the collator wherever they sit: alone, inside
//! arrays and inside documents (whose field names stay binary), as in
//! MongoDB. A collection's `_id` index uses its default collation (or is
//! binary), so a query under another collation reads a string `_id` by a
//! scan (`plan/mod.rs`). A filter, sort, update or pipeline
//! hands its collation to the comparisons in its evaluation context
//! (`context.rs`).

use crate::error::{bad_value, FilterError};
use crate::types::type_name;
use bson::{Bson, Document};
use doc::compare::{canonical_type, compare};
use icu_collator::options::{AlternateHandling, CaseLevel, CollatorOptions, MaxVariable, Strength};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::{Collator, CollatorBorrowed, CollatorPreferences};
use std::cmp::Ordering;
use std::sync::Arc;

fn bad(spec: &Document, field: &str) -> FilterError {
    bad_value(format!("Field '{field}' is invalid in: {spec}"))
}

/// A non-simple collation.
pub struct Collation {
    collator: CollatorBorrowed<'static>,
    spec: Document,
}

impl std::fmt::Debug for Collation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collation({})", self.spec)
    }
}

const FIELDS: &[&str] = &[
    "locale",
    "caseLevel",
    "caseFirst",
    "strength",
    "numericOrdering",
    "alternate",
    "maxVariable",
    "normalization",
    "backwards",
    "version",
];

impl Collation {
    /// A command's `collation` field: `None` when absent, empty or simple.
    pub fn parse(v: Option<&Bson>) -> Result<Option<Arc<Collation>>, FilterError> {
        let spec = match v {
            None | Some(Bson::Null) => return Ok(None),
            Some(Bson::Document(d)) if d.is_empty() => return Ok(None),
            Some(Bson::Document(d)) => d,
            Some(other) => {
                return Err(FilterError {
                    code: 14,
                    message: format!(
                        "BSON field 'collation' is the wrong type '{}', expected type 'object'",
                        type_name(other)
                    ),
                })
            }
        };
        if let Some(k) = spec.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(FilterError {
                code: 40415,
                message: format!("BSON field 'collation.{k}' is an unknown field."),
            });
        }
        let locale = match spec.get("locale") {
            Some(Bson::String(l)) => l.as_str(),
            Some(_) => return Err(bad(spec, "locale")),
            None => {
                return Err(FilterError {
                    code: 40414,
                    message: "BSON field 'collation.locale' is missing but a required field".into(),
                })
            }
        };
        if locale == "simple" {
            if spec.len() > 1 {
                return Err(FilterError {
                    code: 51002,
                    message: format!("Collation spec with simple locale must not contain other fields: {spec}"),
                });
            }
            return Ok(None);
        }
        let bool_field = |f: &str| match spec.get(f) {
            None => Ok(false),
            Some(Bson::Boolean(b)) => Ok(*b),
            Some(_) => Err(bad(spec, f)),
        };
        let loc: icu_locale_core::Locale = locale.replace('_', "-").parse().map_err(|_| bad(spec, "locale"))?;
        let mut prefs = CollatorPreferences::from(&loc);
        let mut options = CollatorOptions::default();
        options.strength = Some(match (spec.get("strength"), strength_level(spec)) {
            (None, _) => Strength::Tertiary,
            (_, Some(1)) => Strength::Primary,
            (_, Some(2)) => Strength::Secondary,
            (_, Some(3)) => Strength::Tertiary,
            (_, Some(4)) => Strength::Quaternary,
            (_, Some(5)) => Strength::Identical,
            _ => return Err(bad(spec, "strength")),
        });
        options.case_level = Some(if bool_field("caseLevel")? { CaseLevel::On } else { CaseLevel::Off });
        prefs.case_first = Some(match spec.get("caseFirst") {
            None => CollationCaseFirst::False,
            Some(Bson::String(s)) => match s.as_str() {
                "upper" => CollationCaseFirst::Upper,
                "lower" => CollationCaseFirst::Lower,
                "off" => CollationCaseFirst::False,
                _ => return Err(bad(spec, "caseFirst")),
            },
            Some(_) => return Err(bad(spec, "caseFirst")),
        });
        if bool_field("numericOrdering")? {
            prefs.numeric_ordering = Some(CollationNumericOrdering::True);
        }
        options.alternate_handling = Some(match spec.get("alternate") {
            None => AlternateHandling::NonIgnorable,
            Some(Bson::String(s)) if s == "non-ignorable" => AlternateHandling::NonIgnorable,
            Some(Bson::String(s)) if s == "shifted" => AlternateHandling::Shifted,
            Some(_) => return Err(bad(spec, "alternate")),
        });
        options.max_variable = Some(match spec.get("maxVariable") {
            None => MaxVariable::Punctuation,
            Some(Bson::String(s)) if s == "punct" => MaxVariable::Punctuation,
            Some(Bson::String(s)) if s == "space" => MaxVariable::Space,
            Some(_) => return Err(bad(spec, "maxVariable")),
        });
        // ICU4X always normalizes (the result of `normalization: true`);
        // backwards secondary ordering (French) it does not offer.
        bool_field("normalization")?;
        if bool_field("backwards")? {
            return Err(FilterError { code: 238, message: "collation option 'backwards' is not supported yet".into() });
        }
        let collator = Collator::try_new(prefs, options).map_err(|_| bad(spec, "locale"))?;
        Ok(Some(Arc::new(Collation { collator, spec: spec.clone() })))
    }

    /// The collation with every field filled in, as mongod reports a
    /// collection's default collation.
    pub fn full_spec(&self) -> Document {
        let s = &self.spec;
        let text = |f: &str, default: &str| s.get_str(f).unwrap_or(default).to_string();
        let flag = |f: &str| s.get_bool(f).unwrap_or(false);
        let mut d = Document::new();
        d.insert("locale", text("locale", ""));
        d.insert("caseLevel", flag("caseLevel"));
        d.insert("caseFirst", text("caseFirst", "off"));
        d.insert("strength", strength_level(s).unwrap_or(3));
        d.insert("numericOrdering", flag("numericOrdering"));
        d.insert("alternate", text("alternate", "non-ignorable"));
        d.insert("maxVariable", text("maxVariable", "punct"));
        d.insert("normalization", flag("normalization"));
        d.insert("backwards", flag("backwards"));
        d.insert("version", "57.1");
        d
    }

    pub fn compare_str(&self, a: &str, b: &str) -> Ordering {
        self.collator.compare(a, b)
    }

    /// MongoDB's order of `a` and `b`, strings collated.
    pub fn compare(&self, a: &Bson, b: &Bson) -> Ordering {
        let (ta, tb) = (canonical_type(a), canonical_type(b));
        if ta != tb {
            return ta.cmp(&tb);
        }
        match (a, b) {
            (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => self.compare_str(x, y),
            (Bson::Array(x), Bson::Array(y)) => {
                x.iter().zip(y).map(|(l, r)| self.compare(l, r)).find(|o| o.is_ne()).unwrap_or(x.len().cmp(&y.len()))
            }
            (Bson::Document(x), Bson::Document(y)) => self.compare_documents(x, y),
            _ => compare(a, b),
        }
    }

    /// `v` with every string replaced by its sort key (as hex text): values
    /// equal under the collation get equal binary forms (a `$group` key).
    pub(crate) fn key_of(&self, v: &Bson) -> Bson {
        match v {
            Bson::String(s) | Bson::Symbol(s) => {
                let mut key: Vec<u8> = Vec::new();
                let Ok(()) = self.collator.write_sort_key_to(s, &mut key);
                Bson::String(key.iter().map(|b| format!("{b:02x}")).collect())
            }
            Bson::Array(items) => Bson::Array(items.iter().map(|x| self.key_of(x)).collect()),
            Bson::Document(d) => Bson::Document(d.iter().map(|(k, x)| (k.clone(), self.key_of(x))).collect()),
            other => other.clone(),
        }
    }

    fn compare_documents(&self, x: &Document, y: &Document) -> Ordering {
        for ((kx, vx), (ky, vy)) in x.iter().zip(y) {
            let o = canonical_type(vx)
                .cmp(&canonical_type(vy))
                .then_with(|| kx.as_bytes().cmp(ky.as_bytes()))
                .then_with(|| self.compare(vx, vy));
            if o.is_ne() {
                return o;
            }
        }
        x.len().cmp(&y.len())
    }
}

/// A spec's `strength` as a whole number (a double only if integral).
fn strength_level(spec: &Document) -> Option<i32> {
    match spec.get("strength")? {
        Bson::Int32(i) => Some(*i),
        Bson::Int64(i) => i32::try_from(*i).ok(),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 1e9 => Some(*f as i32),
        _ => None,
    }
}

/// The `_id` index applies a collection's default collation through its
/// sort keys (`Collation::key_of`). They are stored, so the ICU version
/// that makes them is pinned (Cargo.lock), as mongod records "57.1".
impl doc::catalog::KeyCollation for Collation {
    fn key_of(&self, id: &Bson) -> Bson {
        Collation::key_of(self, id)
    }

    fn full_spec(&self) -> Document {
        Collation::full_spec(self)
    }

    fn key_format(&self) -> &'static str {
        KEY_FORMAT
    }
}

/// The sort keys `_id` indexes store: ICU4X's collator 2.4 with its
/// compiled CLDR data. A dependency update that changes any key must
/// change this name (`id_keys_are_stable` pins sample keys), so that an
/// index with keys of the old format is refused rather than misread.
pub const KEY_FORMAT: &str = "icu4x-collator-2.4";

/// The `_id` index collation of a stored collation spec, for
/// `Catalog::open_with`.
pub fn key_collation(spec: &Document) -> Option<Arc<dyn doc::catalog::KeyCollation>> {
    let c = Collation::parse(Some(&Bson::Document(spec.clone()))).ok().flatten()?;
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn c(spec: Document) -> Arc<Collation> {
        Collation::parse(Some(&Bson::Document(spec))).unwrap().unwrap()
    }

    #[test]
    fn strength_case_and_numeric_ordering() {
        let s2 = c(doc! { "locale": "en_US", "strength": 2 });
        assert_eq!(s2.compare(&bson!("ping"), &bson!("PING")), Ordering::Equal);
        assert_eq!(s2.compare(&bson!("e"), &bson!("é")), Ordering::Less);
        let s1 = c(doc! { "locale": "en", "strength": 1 });
        assert_eq!(s1.compare(&bson!("e"), &bson!("É")), Ordering::Equal);
        let num = c(doc! { "locale": "en", "numericOrdering": true });
        assert_eq!(num.compare(&bson!("a10"), &bson!("a9")), Ordering::Greater);
        // Inside documents and arrays; other types as MongoDB orders them.
        assert_eq!(s2.compare(&bson!({ "a": ["X"] }), &bson!({ "a": ["x"] })), Ordering::Equal);
        assert_eq!(s2.compare(&bson!(1), &bson!("a")), Ordering::Less);
    }

    /// `en`, strength 2: "ann", "ANN", "Ärger", "a10".
    const PINNED_KEYS: [&str; 4] = ["2b45450107", "2b45450107", "2b4d37334d01459608", "2b14120107"];

    #[test]
    fn id_keys_are_stable() {
        use doc::catalog::KeyCollation;
        let s2 = c(doc! { "locale": "en", "strength": 2 });
        let keys: Vec<String> = ["ann", "ANN", "Ärger", "a10"]
            .iter()
            .map(|s| match KeyCollation::key_of(&*s2, &bson!(*s)) {
                Bson::String(k) => k,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(keys[0], keys[1]);
        // Were these to change, KEY_FORMAT must change with them.
        assert_eq!(keys, PINNED_KEYS, "collation sort keys changed: bump KEY_FORMAT");
    }

    #[test]
    fn specs_are_checked() {
        assert!(Collation::parse(Some(&bson!({ "locale": "simple" }))).unwrap().is_none());
        let code = |spec: Bson| Collation::parse(Some(&spec)).unwrap_err().code;
        assert_eq!(code(bson!({ "locale": "en", "strength": 9 })), 2);
        assert_eq!(code(bson!({ "strength": 1 })), 40414);
        assert_eq!(code(bson!({ "locale": "en", "frob": 1 })), 40415);
        assert_eq!(code(bson!({ "locale": "simple", "strength": 1 })), 51002);
        assert_eq!(code(bson!({ "locale": "en", "caseFirst": "sideways" })), 2);
        assert_eq!(code(bson!("en")), 14);
    }
}
