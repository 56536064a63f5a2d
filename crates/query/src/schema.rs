//! `$jsonSchema`: MongoDB's JSON Schema (draft 4 with `bsonType`), as a
//! query operator and so as a collection validator.
//!
//! As in MongoDB, a restriction keyword applies only to values of its own
//! type (`minimum` to numbers, `minLength` to strings, `properties` to
//! objects, `items` to arrays) and passes any other value; only `type` /
//! `bsonType` and `enum` constrain the type. Property names are looked up
//! as single fields, without array traversal. Parse errors carry mongod's
//! codes and messages (FailedToParse for unknown or unsupported keywords).

use crate::error::{bad_value, err, FilterError, FAILED_TO_PARSE, TYPE_MISMATCH};
use crate::regex::Regex;
use crate::types::{has_type, type_code};
use bson::{Bson, Document};
use doc::compare::{compare, number, Number};
use std::cmp::Ordering;

fn failed_to_parse(message: impl Into<String>) -> FilterError {
    err(FAILED_TO_PARSE, message)
}

fn type_mismatch(message: impl Into<String>) -> FilterError {
    err(TYPE_MISMATCH, message)
}

/// What properties not named in `properties` (nor matched by
/// `patternProperties`) may be.
#[derive(Debug, Clone)]
enum Additional {
    Any,
    None,
    Schema(Box<JsonSchema>),
}

impl Additional {
    fn allows(&self, v: &Bson) -> bool {
        match self {
            Additional::Any => true,
            Additional::None => false,
            Additional::Schema(s) => s.matches_value(v),
        }
    }
}

/// The nested schemas of an object-valued keyword (`properties`,
/// `patternProperties`) by name; none when the keyword is absent.
fn schema_map(schema: &Document, keyword: &str) -> Result<Vec<(String, JsonSchema)>, FilterError> {
    let Some(p) = schema.get(keyword) else { return Ok(Vec::new()) };
    let Bson::Document(p) = p else {
        return Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an object")));
    };
    p.iter()
        .map(|(name, sub)| match sub {
            Bson::Document(sub) => Ok((name.clone(), JsonSchema::parse(sub)?)),
            _ => Err(type_mismatch(format!("Nested schema for $jsonSchema property '{name}' must be an object"))),
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Dependency {
    Properties(Vec<String>),
    Schema(Box<JsonSchema>),
}

#[derive(Debug, Clone)]
enum Items {
    All(Box<JsonSchema>),
    /// Positional schemas, then what the rest must be.
    Each(Vec<JsonSchema>, Additional),
}

#[derive(Debug, Clone)]
enum Keyword {
    Types(Vec<i32>),
    Required(Vec<String>),
    Object { properties: Vec<(String, JsonSchema)>, patterns: Vec<(Regex, JsonSchema)>, additional: Additional },
    MinProperties(usize),
    MaxProperties(usize),
    Minimum(Bson, bool),
    Maximum(Bson, bool),
    MultipleOf(f64),
    MinLength(usize),
    MaxLength(usize),
    Pattern(Box<Regex>),
    Enum(Vec<Bson>),
    Items(Items),
    MinItems(usize),
    MaxItems(usize),
    UniqueItems,
    AllOf(Vec<JsonSchema>),
    AnyOf(Vec<JsonSchema>),
    OneOf(Vec<JsonSchema>),
    Not(Box<JsonSchema>),
    Dependencies(Vec<(String, Dependency)>),
}

/// A parsed schema.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    keywords: Vec<Keyword>,
}

const KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "bsonType",
    "dependencies",
    "description",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
];

const UNSUPPORTED: &[&str] =
    &["$ref", "$schema", "default", "definitions", "format", "id", "encrypt", "encryptMetadata"];

/// A nested schema argument.
fn schema_arg(keyword: &str, v: &Bson) -> Result<JsonSchema, FilterError> {
    match v {
        Bson::Document(d) => JsonSchema::parse(d),
        _ => Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an object"))),
    }
}

/// A non-negative integer argument (`minLength` and the like).
fn count_arg(keyword: &str, v: &Bson) -> Result<usize, FilterError> {
    let n = match number(v) {
        Some(Number::Int(i)) => i as f64,
        Some(Number::Float(f)) => f,
        None => return Err(failed_to_parse(format!("Expected a number in: {keyword}: {v}"))),
    };
    if n.fract() != 0.0 {
        return Err(failed_to_parse(format!("Expected an integer: {keyword}: {v}")));
    }
    if n < 0.0 {
        return Err(failed_to_parse(format!("Expected a positive number in: {keyword}: {v}")));
    }
    Ok(n as usize)
}

fn schema_list(keyword: &str, v: &Bson) -> Result<Vec<JsonSchema>, FilterError> {
    let Bson::Array(items) = v else {
        return Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an array")));
    };
    if items.is_empty() {
        return Err(bad_value(format!("$jsonSchema keyword '{keyword}' must be a non-empty array")));
    }
    items
        .iter()
        .map(|i| match i {
            Bson::Document(d) => JsonSchema::parse(d),
            _ => Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an array of objects"))),
        })
        .collect()
}

fn additional_arg(keyword: &str, v: &Bson) -> Result<Additional, FilterError> {
    match v {
        Bson::Boolean(true) => Ok(Additional::Any),
        Bson::Boolean(false) => Ok(Additional::None),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(JsonSchema::parse(d)?))),
        _ => Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be either an object or a boolean"))),
    }
}

/// `type` or `bsonType` as `$type` codes (-2: any number).
fn types_arg(keyword: &str, v: &Bson) -> Result<Vec<i32>, FilterError> {
    let names: Vec<&str> = match v {
        Bson::String(s) => vec![s.as_str()],
        Bson::Array(items) => items
            .iter()
            .map(|i| match i {
                Bson::String(s) => Ok(s.as_str()),
                _ => Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' array elements must be strings"))),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(type_mismatch(format!(
                "$jsonSchema keyword '{keyword}' must be either a string or an array of strings"
            )))
        }
    };
    let mut codes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(failed_to_parse(format!("$jsonSchema keyword '{keyword}' has duplicate value: {name}")));
        }
        let code = if keyword == "type" {
            match *name {
                "object" => 3,
                "array" => 4,
                "number" => -2,
                "boolean" => 8,
                "string" => 2,
                "null" => 10,
                "integer" => {
                    return Err(bad_value("$jsonSchema type 'integer' is not currently supported."));
                }
                other => return Err(bad_value(format!("Unknown JSON Schema alias: {other}"))),
            }
        } else {
            type_code(&Bson::String(name.to_string()))?
        };
        codes.push(code);
    }
    if codes.is_empty() {
        return Err(failed_to_parse(format!("$jsonSchema keyword '{keyword}' must name at least one type")));
    }
    Ok(codes)
}

fn names_arg(keyword: &str, v: &Bson) -> Result<Vec<String>, FilterError> {
    let Bson::Array(items) = v else {
        return Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an array")));
    };
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let Bson::String(s) = item else {
            return Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be an array of strings")));
        };
        if names.contains(s) {
            return Err(failed_to_parse(format!(
                "$jsonSchema keyword '{keyword}' array cannot contain duplicate values"
            )));
        }
        names.push(s.clone());
    }
    if names.is_empty() {
        return Err(failed_to_parse(format!("$jsonSchema keyword '{keyword}' cannot be an empty array")));
    }
    Ok(names)
}

fn bound_arg(keyword: &str, v: &Bson, exclusive: Option<&Bson>, exclusive_name: &str) -> Result<Keyword, FilterError> {
    if number(v).is_none() {
        return Err(type_mismatch(format!("$jsonSchema keyword '{keyword}' must be a number")));
    }
    let exclusive = match exclusive {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(_) => return Err(type_mismatch(format!("$jsonSchema keyword '{exclusive_name}' must be a boolean"))),
    };
    Ok(if keyword == "minimum" {
        Keyword::Minimum(v.clone(), exclusive)
    } else {
        Keyword::Maximum(v.clone(), exclusive)
    })
}

impl JsonSchema {
    pub fn parse(schema: &Document) -> Result<JsonSchema, FilterError> {
        for (k, v) in schema {
            if UNSUPPORTED.contains(&k.as_str()) {
                return Err(failed_to_parse(format!("$jsonSchema keyword '{k}' is not currently supported")));
            }
            if !KEYWORDS.contains(&k.as_str()) {
                return Err(failed_to_parse(format!("Unknown $jsonSchema keyword: {k}")));
            }
            if matches!(k.as_str(), "title" | "description") && !matches!(v, Bson::String(_)) {
                return Err(type_mismatch(format!("$jsonSchema keyword '{k}' must be of type string")));
            }
        }
        if schema.contains_key("type") && schema.contains_key("bsonType") {
            return Err(failed_to_parse("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"));
        }
        for (bound, exclusive) in [("maximum", "exclusiveMaximum"), ("minimum", "exclusiveMinimum")] {
            if schema.contains_key(exclusive) && !schema.contains_key(bound) {
                return Err(failed_to_parse(format!(
                    "$jsonSchema keyword '{bound}' must be a present if {exclusive} is present"
                )));
            }
        }
        let mut keywords = Vec::new();
        for (k, v) in schema {
            keywords.push(match k.as_str() {
                "type" | "bsonType" => Keyword::Types(types_arg(k, v)?),
                "required" => Keyword::Required(names_arg(k, v)?),
                "properties" | "patternProperties" | "additionalProperties" => {
                    // Parsed once, when the first of the three is met.
                    if keywords.iter().any(|kw| matches!(kw, Keyword::Object { .. })) {
                        continue;
                    }
                    let properties = schema_map(schema, "properties")?;
                    let patterns = schema_map(schema, "patternProperties")?
                        .into_iter()
                        .map(|(pattern, sub)| Ok((Regex::new(&pattern, "")?, sub)))
                        .collect::<Result<Vec<_>, FilterError>>()?;
                    let additional = match schema.get("additionalProperties") {
                        None => Additional::Any,
                        Some(a) => additional_arg("additionalProperties", a)?,
                    };
                    Keyword::Object { properties, patterns, additional }
                }
                "minProperties" => Keyword::MinProperties(count_arg(k, v)?),
                "maxProperties" => Keyword::MaxProperties(count_arg(k, v)?),
                "minimum" => bound_arg(k, v, schema.get("exclusiveMinimum"), "exclusiveMinimum")?,
                "maximum" => bound_arg(k, v, schema.get("exclusiveMaximum"), "exclusiveMaximum")?,
                "exclusiveMinimum" | "exclusiveMaximum" | "title" | "description" | "additionalItems" => continue,
                "multipleOf" => match number(v) {
                    None => return Err(type_mismatch("$jsonSchema keyword 'multipleOf' must be a number")),
                    Some(n) => {
                        let m = match n {
                            Number::Int(i) => i as f64,
                            Number::Float(f) => f,
                        };
                        if m.is_nan() || m <= 0.0 {
                            return Err(failed_to_parse("$jsonSchema keyword 'multipleOf' must have a positive value"));
                        }
                        Keyword::MultipleOf(m)
                    }
                },
                "minLength" => Keyword::MinLength(count_arg(k, v)?),
                "maxLength" => Keyword::MaxLength(count_arg(k, v)?),
                "pattern" => match v {
                    Bson::String(p) => Keyword::Pattern(Box::new(Regex::new(p, "")?)),
                    _ => return Err(type_mismatch("$jsonSchema keyword 'pattern' must be a string")),
                },
                "enum" => match v {
                    Bson::Array(items) if items.is_empty() => {
                        return Err(failed_to_parse("$jsonSchema keyword 'enum' cannot be an empty array"))
                    }
                    Bson::Array(items) => Keyword::Enum(items.clone()),
                    _ => return Err(type_mismatch("$jsonSchema keyword 'enum' must be an array")),
                },
                "items" => Keyword::Items(match v {
                    Bson::Document(d) => Items::All(Box::new(JsonSchema::parse(d)?)),
                    Bson::Array(_) => {
                        let each = schema_list(k, v)?;
                        let rest = match schema.get("additionalItems") {
                            None => Additional::Any,
                            Some(a) => additional_arg("additionalItems", a)?,
                        };
                        Items::Each(each, rest)
                    }
                    _ => {
                        return Err(type_mismatch(
                            "$jsonSchema keyword 'items' must be an array or an object",
                        ))
                    }
                }),
                "minItems" => Keyword::MinItems(count_arg(k, v)?),
                "maxItems" => Keyword::MaxItems(count_arg(k, v)?),
                "uniqueItems" => match v {
                    Bson::Boolean(true) => Keyword::UniqueItems,
                    Bson::Boolean(false) => continue,
                    _ => return Err(type_mismatch("$jsonSchema keyword 'uniqueItems' must be a boolean")),
                },
                "allOf" => Keyword::AllOf(schema_list(k, v)?),
                "anyOf" => Keyword::AnyOf(schema_list(k, v)?),
                "oneOf" => Keyword::OneOf(schema_list(k, v)?),
                "not" => Keyword::Not(Box::new(schema_arg(k, v)?)),
                "dependencies" => {
                    let Bson::Document(deps) = v else {
                        return Err(type_mismatch("$jsonSchema keyword 'dependencies' must be an object"));
                    };
                    if deps.is_empty() {
                        return Err(failed_to_parse("$jsonSchema keyword 'dependencies' must be a non-empty object"));
                    }
                    let mut out = Vec::new();
                    for (name, dep) in deps {
                        out.push((
                            name.clone(),
                            match dep {
                                Bson::Document(d) => Dependency::Schema(Box::new(JsonSchema::parse(d)?)),
                                Bson::Array(_) => Dependency::Properties(names_arg("dependencies", dep)?),
                                _ => {
                                    return Err(type_mismatch(format!(
                                        "property '{name}' in $jsonSchema keyword 'dependencies' must be either an object or an array"
                                    )))
                                }
                            },
                        ));
                    }
                    Keyword::Dependencies(out)
                }
                other => unreachable!("checked against KEYWORDS: {other}"),
            });
        }
        Ok(JsonSchema { keywords })
    }

    /// Whether a document (the top level, or an embedded object)
    /// satisfies the schema.
    pub fn matches_document(&self, doc: &Document) -> bool {
        self.keywords.iter().all(|k| keyword_on_object(k, doc))
    }

    /// Whether a value satisfies the schema.
    pub fn matches_value(&self, v: &Bson) -> bool {
        match v {
            Bson::Document(d) => self.matches_document(d),
            v => self.keywords.iter().all(|k| keyword_on_value(k, v)),
        }
    }
}

/// A keyword on an object; the keywords of other types pass it.
fn keyword_on_object(k: &Keyword, doc: &Document) -> bool {
    match k {
        Keyword::Types(codes) => codes.contains(&3),
        Keyword::Required(names) => names.iter().all(|n| doc.contains_key(n)),
        Keyword::Object { properties, patterns, additional } => doc.iter().all(|(name, value)| {
            let named = properties.iter().find(|(p, _)| p == name);
            if let Some((_, s)) = named {
                if !s.matches_value(value) {
                    return false;
                }
            }
            let mut matched_pattern = false;
            for (re, s) in patterns {
                if re.matches(&Bson::String(name.clone())) {
                    matched_pattern = true;
                    if !s.matches_value(value) {
                        return false;
                    }
                }
            }
            if named.is_some() || matched_pattern {
                return true;
            }
            additional.allows(value)
        }),
        Keyword::MinProperties(n) => doc.len() >= *n,
        Keyword::MaxProperties(n) => doc.len() <= *n,
        Keyword::Dependencies(deps) => deps.iter().all(|(name, dep)| {
            !doc.contains_key(name)
                || match dep {
                    Dependency::Properties(names) => names.iter().all(|n| doc.contains_key(n)),
                    Dependency::Schema(s) => s.matches_document(doc),
                }
        }),
        Keyword::Enum(items) => {
            let v = Bson::Document(doc.clone());
            items.iter().any(|i| compare(i, &v) == Ordering::Equal)
        }
        Keyword::AllOf(s) => s.iter().all(|s| s.matches_document(doc)),
        Keyword::AnyOf(s) => s.iter().any(|s| s.matches_document(doc)),
        Keyword::OneOf(s) => s.iter().filter(|s| s.matches_document(doc)).count() == 1,
        Keyword::Not(s) => !s.matches_document(doc),
        _ => true,
    }
}

/// A keyword on a value that is not an object.
fn keyword_on_value(k: &Keyword, v: &Bson) -> bool {
    match k {
        Keyword::Types(codes) => has_type(v, codes),
        Keyword::Minimum(bound, exclusive) | Keyword::Maximum(bound, exclusive) => {
            if number(v).is_none() {
                return true;
            }
            let ord = compare(v, bound);
            match (matches!(k, Keyword::Minimum(..)), exclusive) {
                (true, false) => ord != Ordering::Less,
                (true, true) => ord == Ordering::Greater,
                (false, false) => ord != Ordering::Greater,
                (false, true) => ord == Ordering::Less,
            }
        }
        Keyword::MultipleOf(m) => match number(v) {
            None => true,
            Some(Number::Int(i)) => (i as f64 % m) == 0.0,
            Some(Number::Float(f)) => f.is_finite() && (f % m) == 0.0,
        },
        Keyword::MinLength(n) => !matches!(v, Bson::String(s) if s.chars().count() < *n),
        Keyword::MaxLength(n) => !matches!(v, Bson::String(s) if s.chars().count() > *n),
        Keyword::Pattern(re) => !matches!(v, Bson::String(_)) || re.matches(v),
        Keyword::Enum(items) => items.iter().any(|i| compare(i, v) == Ordering::Equal),
        Keyword::Items(items) => {
            let Bson::Array(arr) = v else { return true };
            match items {
                Items::All(s) => arr.iter().all(|e| s.matches_value(e)),
                Items::Each(each, rest) => arr.iter().enumerate().all(|(i, e)| match each.get(i) {
                    Some(s) => s.matches_value(e),
                    None => rest.allows(e),
                }),
            }
        }
        Keyword::MinItems(n) => !matches!(v, Bson::Array(a) if a.len() < *n),
        Keyword::MaxItems(n) => !matches!(v, Bson::Array(a) if a.len() > *n),
        Keyword::UniqueItems => match v {
            Bson::Array(a) => {
                a.iter().enumerate().all(|(i, x)| a[..i].iter().all(|y| compare(x, y) != Ordering::Equal))
            }
            _ => true,
        },
        Keyword::AllOf(s) => s.iter().all(|s| s.matches_value(v)),
        Keyword::AnyOf(s) => s.iter().any(|s| s.matches_value(v)),
        Keyword::OneOf(s) => s.iter().filter(|s| s.matches_value(v)).count() == 1,
        Keyword::Not(s) => !s.matches_value(v),
        // Object keywords pass non-objects.
        Keyword::Required(_)
        | Keyword::Object { .. }
        | Keyword::MinProperties(_)
        | Keyword::MaxProperties(_)
        | Keyword::Dependencies(_) => true,
    }
}
