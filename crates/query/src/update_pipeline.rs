//! Pipeline-style updates (`u: [stages]`): `$addFields`/`$set`,
//! `$unset`, `$project` (inclusion or exclusion), `$replaceRoot` and
//! `$replaceWith`, each over the document the previous stage produced.
//! Expressions see the stage's input document (`expr/`). Also the stage
//! helpers `pipeline.rs` shares (`stage_of`, `unset_fields`, `unset`):
//! it runs these stages, so it builds on this file, not the reverse.

use crate::context::EvalContext;
use crate::error::{err, FilterError};
use crate::expr::{Expression, Scope, FIELD_PATH_PARTS_MAX};
use crate::projection::Projection;
use crate::types::type_name;
use bson::{Bson, Document};

#[derive(Debug, Clone)]
enum Stage {
    /// `$addFields` / `$set`: dotted paths and their expressions, in order.
    AddFields(Vec<(Vec<String>, Expression)>),
    Unset(Vec<Vec<String>>),
    Project(Box<Projection>),
    ReplaceRoot(Expression),
}

/// A parsed update pipeline.
#[derive(Debug, Clone)]
pub struct UpdatePipeline {
    stages: Vec<Stage>,
}

fn path_parts(path: &str, stage: &str) -> Result<Vec<String>, FilterError> {
    if path.split('.').count() > FIELD_PATH_PARTS_MAX {
        return Err(err(15, "FieldPath is too long"));
    }
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(err(
            40352,
            format!("Invalid {stage} :: caused by :: FieldPath cannot be constructed with empty string"),
        ));
    }
    if path.starts_with('$') {
        return Err(err(
            16410,
            format!(
                "FieldPath field names may not start with '$'. Consider using $getField or $setField. (in '{path}')"
            ),
        ));
    }
    Ok(path.split('.').map(str::to_string).collect())
}

impl UpdatePipeline {
    pub fn parse(stages: &[Bson], scope: &Scope) -> Result<UpdatePipeline, FilterError> {
        let mut out = Vec::new();
        for s in stages {
            let (name, arg) = stage_of(s)?;
            out.push(match name.as_str() {
                "$addFields" | "$set" => {
                    let Bson::Document(fields) = arg else {
                        return Err(err(
                            40272,
                            format!("{name} specification stage must be an object, got {}", type_name(arg)),
                        ));
                    };
                    let mut parsed = Vec::new();
                    for (path, v) in fields {
                        parsed.push((path_parts(path, name)?, Expression::parse(v, scope)?));
                    }
                    Stage::AddFields(parsed)
                }
                "$unset" => {
                    let paths = unset_fields(arg)?;
                    let parsed = paths.iter().map(|p| path_parts(p, name)).collect::<Result<_, _>>()?;
                    Stage::Unset(parsed)
                }
                "$project" => {
                    let Bson::Document(spec) = arg else {
                        return Err(err(15969, "$project specification must be an object"));
                    };
                    Stage::Project(Box::new(Projection::parse_in(spec, scope)?))
                }
                "$replaceRoot" => {
                    let new_root = match arg {
                        Bson::Document(d) => d.get("newRoot"),
                        other => {
                            return Err(err(
                                40229,
                                format!(
                                    "expected an object as specification for $replaceRoot stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                    };
                    let Some(new_root) = new_root else {
                        return Err(err(40231, "no newRoot specified for the $replaceRoot stage"));
                    };
                    Stage::ReplaceRoot(Expression::parse(new_root, scope)?)
                }
                "$replaceWith" => Stage::ReplaceRoot(Expression::parse(arg, scope)?),
                other => {
                    return Err(err(72, format!("{other} is not allowed to be used within an update")));
                }
            });
        }
        Ok(UpdatePipeline { stages: out })
    }

    /// The document the pipeline makes of `doc`, strings compared binary.
    pub fn apply(&self, doc: &Document) -> Result<Document, FilterError> {
        self.apply_in(doc, &EvalContext::new(None))
    }

    /// [`UpdatePipeline::apply`], strings compared as `cx` says.
    pub(crate) fn apply_in(&self, doc: &Document, cx: &EvalContext) -> Result<Document, FilterError> {
        let mut cur = doc.clone();
        for stage in &self.stages {
            cur = match stage {
                Stage::AddFields(fields) => {
                    let input = cur.clone();
                    for (path, e) in fields {
                        set(&mut cur, path, &Value::of(e, &input, cx)?);
                    }
                    cur
                }
                Stage::Unset(paths) => {
                    for p in paths {
                        unset(&mut cur, p);
                    }
                    cur
                }
                Stage::Project(p) => p.apply_in(&cur, None, cx)?,
                Stage::ReplaceRoot(e) => match e.eval_in(&cur, cx)? {
                    Some(Bson::Document(d)) => d,
                    other => {
                        return Err(err(
                            40228,
                            format!(
                                "'replacement document' must evaluate to an object, but resulting value was: {}. Type of resulting value: '{}'.",
                                other.as_ref().map_or("MISSING".to_string(), |v| v.to_string()),
                                other.as_ref().map_or("missing", type_name)
                            ),
                        ))
                    }
                },
            };
            // Each stage can nest the document deeper; stop before a
            // document too deep to store (or to clone without recursion
            // trouble) is built.
            check_depth(&cur)?;
        }
        Ok(cur)
    }
}

/// The field paths of a `$unset` stage: a string or a nonempty array of
/// strings.
pub(crate) fn unset_fields(arg: &Bson) -> Result<Vec<String>, FilterError> {
    match arg {
        Bson::String(f) => Ok(vec![f.clone()]),
        Bson::Array(items) if items.is_empty() => {
            Err(err(31119, "$unset specification must be a string or an array with at least one field"))
        }
        Bson::Array(items) if items.iter().all(|i| matches!(i, Bson::String(_))) => {
            Ok(items.iter().filter_map(|i| i.as_str().map(str::to_string)).collect())
        }
        Bson::Array(_) => {
            Err(err(31120, "$unset specification must be a string or an array containing only string values"))
        }
        _ => Err(err(31002, "$unset specification must be a string or an array")),
    }
}

/// A stage's name and argument: each stage is a one-field document.
pub(crate) fn stage_of(s: &Bson) -> Result<(&String, &Bson), FilterError> {
    let Bson::Document(d) = s else {
        return Err(err(14, "Each element of the 'pipeline' array must be an object"));
    };
    if d.len() != 1 {
        return Err(err(40323, "A pipeline stage specification object must contain exactly one field."));
    }
    Ok(d.iter().next().expect("one field"))
}

/// Refuse a document nested deeper than a stored document may be, after
/// every stage, so a pipeline cannot grow one without bound.
pub(crate) fn check_depth(d: &Document) -> Result<(), FilterError> {
    if doc::bson_bytes::deeper_than(d, doc::limits::stored_depth_max) {
        return Err(err(15, "BSONObj exceeds maximum nested object depth"));
    }
    Ok(())
}

/// What `$addFields` puts at a path: a value, nothing (remove it), or an
/// expression object, whose fields merge into an existing document.
#[derive(Clone)]
enum Value {
    Missing,
    Plain(Bson),
    Object(Vec<(String, Value)>),
}

impl Value {
    fn of(e: &Expression, input: &Document, cx: &EvalContext) -> Result<Value, FilterError> {
        if let Some(fields) = e.as_object() {
            let mut out = Vec::new();
            for (k, sub) in fields {
                out.push((k.to_string(), Value::of(&sub, input, cx)?));
            }
            return Ok(Value::Object(out));
        }
        Ok(match e.eval_in(input, cx)? {
            None => Value::Missing,
            Some(v) => Value::Plain(v),
        })
    }

    /// The value on its own (an object's missing fields left out).
    fn to_bson(&self) -> Option<Bson> {
        match self {
            Value::Missing => None,
            Value::Plain(v) => Some(v.clone()),
            Value::Object(fields) => {
                Some(Bson::Document(fields.iter().filter_map(|(k, v)| Some((k.clone(), v.to_bson()?))).collect()))
            }
        }
    }
}

/// Set `path` in `d` to `v`, as `$addFields` does: through arrays into
/// each element, creating documents where the path has none.
fn set(d: &mut Document, path: &[String], v: &Value) {
    let (head, rest) = path.split_first().expect("paths are not empty");
    if rest.is_empty() {
        match (v, d.get_mut(head)) {
            (Value::Missing, _) => {
                d.remove(head);
            }
            (Value::Object(fields), Some(existing)) => merge(existing, fields),
            (v, _) => {
                d.insert(head.clone(), v.to_bson().expect("not missing"));
            }
        }
        return;
    }
    match d.get_mut(head) {
        Some(Bson::Document(inner)) => set(inner, rest, v),
        Some(Bson::Array(items)) => {
            for item in items.iter_mut() {
                set_in_value(item, rest, v);
            }
        }
        _ => {
            if matches!(v, Value::Missing) {
                return;
            }
            let mut inner = Document::new();
            set(&mut inner, rest, v);
            d.insert(head.clone(), inner);
        }
    }
}

fn set_in_value(item: &mut Bson, path: &[String], v: &Value) {
    match item {
        Bson::Document(inner) => set(inner, path, v),
        Bson::Array(items) => items.iter_mut().for_each(|i| set_in_value(i, path, v)),
        other => {
            let mut inner = Document::new();
            set(&mut inner, path, v);
            *other = Bson::Document(inner);
        }
    }
}

/// An expression object's fields into an existing value: a document gets
/// them, each document of an array gets them, anything else is replaced.
fn merge(existing: &mut Bson, fields: &[(String, Value)]) {
    match existing {
        Bson::Document(d) => {
            for (k, v) in fields {
                set(d, std::slice::from_ref(k), v);
            }
        }
        Bson::Array(items) => items.iter_mut().for_each(|i| merge(i, fields)),
        other => *other = Value::Object(fields.to_vec()).to_bson().expect("an object"),
    }
}

/// Remove `path` from `d` (through embedded documents and the documents
/// of arrays).
pub(crate) fn unset(d: &mut Document, path: &[String]) {
    let (head, rest) = path.split_first().expect("paths are not empty");
    if rest.is_empty() {
        d.remove(head);
        return;
    }
    match d.get_mut(head) {
        Some(Bson::Document(inner)) => unset(inner, rest),
        Some(Bson::Array(items)) => {
            for item in items.iter_mut() {
                if let Bson::Document(inner) = item {
                    unset(inner, rest);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn run(stages: Bson, d: Document) -> Result<Document, FilterError> {
        let Bson::Array(stages) = stages else { panic!() };
        UpdatePipeline::parse(&stages, &Scope::default())?.apply(&d)
    }

    #[test]
    fn set_sees_the_stage_input_and_merges_objects() {
        let d = doc! { "_id": 1, "a": 1, "o": { "x": 1 }, "arr": [{ "y": 1 }, 5] };
        let out = run(
            bson!([{ "$set": { "a": { "$add": ["$a", 1] }, "b": "$a", "o": { "z": "$a" }, "arr.k": 0, "gone": "$$REMOVE" } }]),
            d,
        )
        .unwrap();
        assert_eq!(
            out,
            doc! { "_id": 1, "a": 2, "o": { "x": 1, "z": 1 }, "arr": [{ "y": 1, "k": 0 }, { "k": 0 }], "b": 1 }
        );
    }

    #[test]
    fn unset_project_replace() {
        let d = doc! { "_id": 1, "a": { "b": 1, "c": 2 }, "d": 3 };
        assert_eq!(run(bson!([{ "$unset": ["a.b", "d"] }]), d.clone()).unwrap(), doc! { "_id": 1, "a": { "c": 2 } });
        assert_eq!(run(bson!([{ "$project": { "d": 1 } }]), d.clone()).unwrap(), doc! { "_id": 1, "d": 3 });
        assert_eq!(run(bson!([{ "$replaceWith": "$a" }]), d.clone()).unwrap(), doc! { "b": 1, "c": 2 });
        assert_eq!(run(bson!([{ "$replaceWith": "$d" }]), d.clone()).unwrap_err().code, 40228);
        assert_eq!(run(bson!([{ "$group": { "_id": null } }]), d).unwrap_err().code, 72);
    }
}
