//! Find and `$project` projections: inclusion or exclusion of (dotted)
//! paths, the `_id` rules, `$slice`, `$elemMatch`, the positional `a.$`,
//! literal values and computed fields (any aggregation expression:
//! `$field` references, `$$` variables, operators), with MongoDB's errors
//! for invalid mixes.
//!
//! Inclusion keeps the document's own field order, `_id` first; computed
//! fields come after, in the projection's order.

use crate::context::EvalContext;
use crate::error::{bad_value, err, FilterError};
use crate::expr::{Expression, Scope};
use crate::matcher::{ElementFilter, Filter};
use bson::{Bson, Document};
use doc::format;

#[derive(Debug, Clone)]
enum Action {
    Include,
    Exclude,
    Literal(Bson),
    /// A computed field: a `$path`, a `$$variable` or an operator.
    Computed(Box<Expression>),
    /// `$slice`: elements to skip (negative: from the end) and how many.
    Slice(i64, Option<i64>),
    ElemMatch(ElementFilter),
    Positional,
}

#[derive(Debug, Clone, Default)]
struct Node {
    children: Vec<(String, Node)>,
    action: Option<Action>,
}

impl Node {
    fn child(&mut self, name: &str) -> &mut Node {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            return &mut self.children[i].1;
        }
        self.children.push((name.to_string(), Node::default()));
        &mut self.children.last_mut().unwrap().1
    }

    /// Add the fields its computed fields' expressions read to `reads`.
    fn expression_fields(&self, reads: &mut Option<Vec<String>>) {
        if let Some(Action::Computed(e)) = &self.action {
            e.top_fields(reads);
        }
        self.children.iter().for_each(|(_, c)| c.expression_fields(reads));
    }

    fn get(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}

/// A parsed projection.
#[derive(Debug, Clone)]
pub struct Projection {
    inclusion: bool,
    include_id: bool,
    root: Node,
    positional: bool,
    /// The top-level fields an inclusion projection reads (`None`: an
    /// exclusion, which reads the whole document).
    reads: Option<Vec<String>>,
}

impl Projection {
    pub fn parse(spec: &Document) -> Result<Projection, FilterError> {
        Projection::parse_in(spec, &Scope::default())
    }

    /// Parse with a command's `let` variables in scope for computed fields.
    pub fn parse_in(spec: &Document, scope: &Scope) -> Result<Projection, FilterError> {
        let mut flat = Vec::new();
        flatten(spec, "", scope, &mut flat)?;
        let mut inclusion: Option<(bool, String)> = None;
        let mut include_id = true;
        let mut root = Node::default();
        let mut positional = false;
        for (path, action) in flat {
            if path == "_id" && matches!(action, Action::Include | Action::Exclude) {
                include_id = matches!(action, Action::Include);
                continue;
            }
            let kind = match action {
                Action::Exclude => Some(false),
                Action::Slice(..) => None,
                _ => Some(true),
            };
            if let Some(kind) = kind {
                match &inclusion {
                    Some((k, _)) if *k != kind => {
                        return Err(if kind {
                            err(31253, format!("Cannot do inclusion on field {path} in exclusion projection"))
                        } else {
                            err(31254, format!("Cannot do exclusion on field {path} in inclusion projection"))
                        })
                    }
                    _ => inclusion = Some((kind, path.clone())),
                }
            }
            let (path, action) = match path.strip_suffix(".$") {
                Some(base) => {
                    if positional {
                        return Err(FilterError {
                            code: 31276,
                            message: "Cannot specify more than one positional projection per query.".into(),
                        });
                    }
                    positional = true;
                    (base.to_string(), Action::Positional)
                }
                None if path.split('.').any(|p| p == "$") => {
                    return Err(bad_value(format!(
                        "Positional projection '{path}' contains the positional operator somewhere other than the end of the path"
                    )))
                }
                None => (path, action),
            };
            insert(&mut root, &path, action)?;
        }
        // Without included or excluded fields (only `_id` or `$slice`), it
        // is an inclusion only when `_id` is explicitly included alone.
        let inclusion = match inclusion {
            Some((k, _)) => k,
            None => root.children.is_empty() && include_id && spec.contains_key("_id"),
        };
        let reads = inclusion.then(|| {
            let mut reads = Some(if include_id { vec!["_id".to_string()] } else { Vec::new() });
            for (name, node) in &root.children {
                crate::reads::note(&mut reads, name);
                node.expression_fields(&mut reads);
            }
            reads
        });
        Ok(Projection { inclusion, include_id, root, positional, reads: reads.flatten() })
    }

    /// The top-level fields the projection reads: a document holding only
    /// those projects as the whole does. `None` when it reads the whole
    /// document (an exclusion, or an expression reading `$$ROOT`).
    pub fn reads(&self) -> Option<&[String]> {
        self.reads.as_deref()
    }

    /// Does it use the positional `a.$` (which needs the query's match
    /// position)?
    pub fn is_positional(&self) -> bool {
        self.positional
    }

    /// Project `doc`; `position` is where the query matched (for `a.$`).
    /// Strings compare binary (in `$elemMatch` and computed fields).
    pub fn apply(&self, doc: &Document, position: Option<usize>) -> Result<Document, FilterError> {
        self.apply_in(doc, position, &EvalContext::new(None))
    }

    /// [`Projection::apply`], strings compared as `cx` says.
    pub(crate) fn apply_in(
        &self,
        doc: &Document,
        position: Option<usize>,
        cx: &EvalContext,
    ) -> Result<Document, FilterError> {
        Ok(if self.inclusion {
            let mut out = Document::new();
            if self.include_id {
                if let Some(id) = doc.get("_id") {
                    out.insert("_id", id.clone());
                }
            }
            include(&self.root, doc, &mut out, position, cx)?;
            add_computed(&self.root, doc, &mut out, cx)?;
            out
        } else {
            let mut out = exclude(&self.root, doc);
            if !self.include_id {
                out.remove("_id");
            }
            out
        })
    }
}

fn action_of(v: &Bson, scope: &Scope) -> Result<Action, FilterError> {
    Ok(match v {
        Bson::Boolean(b) => {
            if *b {
                Action::Include
            } else {
                Action::Exclude
            }
        }
        Bson::Int32(i) => {
            if *i != 0 {
                Action::Include
            } else {
                Action::Exclude
            }
        }
        Bson::Int64(i) => {
            if *i != 0 {
                Action::Include
            } else {
                Action::Exclude
            }
        }
        Bson::Double(d) => {
            if *d != 0.0 {
                Action::Include
            } else {
                Action::Exclude
            }
        }
        Bson::String(s) if s.starts_with('$') => Action::Computed(Box::new(Expression::parse(v, scope)?)),
        other => Action::Literal(other.clone()),
    })
}

/// Flatten nested projection documents (`{a: {b: 1}}` is `{"a.b": 1}`).
fn flatten(spec: &Document, prefix: &str, scope: &Scope, out: &mut Vec<(String, Action)>) -> Result<(), FilterError> {
    for (k, v) in spec {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        if k.is_empty() || k.split('.').any(str::is_empty) {
            return Err(match k.is_empty() {
                true => {
                    FilterError { code: 40352, message: "FieldPath cannot be constructed with empty string".into() }
                }
                false => FilterError { code: 15998, message: "FieldPath field names may not be empty strings.".into() },
            });
        }
        if k.starts_with('$') && k != "$" {
            return Err(FilterError {
                code: 16410,
                message: "FieldPath field names may not start with '$'. Consider using $getField or $setField.".into(),
            });
        }
        match v {
            Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                let (op, arg) = d.iter().next().unwrap();
                if d.len() != 1 {
                    return Err(bad_value(format!("An expression specification must contain exactly one field, the name of the expression. Found {} fields in {}, while parsing object {}", d.len(), format::document(d), format::document(d))));
                }
                out.push((
                    path.clone(),
                    match op.as_str() {
                        "$slice" => parse_slice(arg)?,
                        "$elemMatch" => {
                            if path.contains('.') {
                                return Err(FilterError {
                                    code: 31275,
                                    message: "Cannot use $elemMatch projection on a nested field.".into(),
                                });
                            }
                            match arg {
                                Bson::Document(_) => Action::ElemMatch(Filter::parse_element(arg)?),
                                _ => {
                                    return Err(FilterError {
                                        code: 31274,
                                        message: "elemMatch: Invalid argument, object required.".into(),
                                    })
                                }
                            }
                        }
                        "$literal" => Action::Literal(arg.clone()),
                        _ => Action::Computed(Box::new(Expression::parse(v, scope)?)),
                    },
                ));
            }
            Bson::Document(d) if !d.is_empty() => flatten(d, &path, scope, out)?,
            Bson::Document(_) => {
                return Err(bad_value(
                    "An empty sub-projection is not a valid value. Found empty object at path".to_string(),
                ))
            }
            v => out.push((path, action_of(v, scope)?)),
        }
    }
    Ok(())
}

fn parse_slice(arg: &Bson) -> Result<Action, FilterError> {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.is_finite() => Some(d.trunc() as i64),
        _ => None,
    };
    match arg {
        Bson::Array(items) if items.len() == 2 => {
            let (Some(skip), Some(limit)) = (int(&items[0]), int(&items[1])) else {
                return Err(bad_value("First argument to $slice must be an array, and both arguments must be numeric"));
            };
            if limit <= 0 {
                return Err(bad_value(format!("Invalid $slice syntax. The given syntax {{ $slice: [{skip}, {limit}] }} did not match the find() syntax because :: Location31025: $slice limit must be positive")));
            }
            Ok(Action::Slice(skip, Some(limit)))
        }
        v => match int(v) {
            Some(n) => Ok(Action::Slice(n, None)),
            None => Err(bad_value("$slice only supports numbers and [skip, limit] arrays")),
        },
    }
}

fn insert(root: &mut Node, path: &str, action: Action) -> Result<(), FilterError> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut node = root;
    for (i, part) in parts.iter().enumerate() {
        if node.action.is_some() {
            return Err(err(31249, format!("Path collision at {path} remaining portion {}", parts[i..].join("."))));
        }
        node = node.child(part);
    }
    if node.action.is_some() || !node.children.is_empty() {
        return Err(err(31250, format!("Path collision at {path}")));
    }
    node.action = Some(action);
    Ok(())
}

fn slice(items: &[Bson], skip: i64, limit: Option<i64>) -> Vec<Bson> {
    let len = items.len() as i64;
    let (start, count) = match limit {
        None if skip >= 0 => (0, skip),
        None => ((len + skip).max(0), len),
        Some(l) => {
            let start = if skip >= 0 { skip.min(len) } else { (len + skip).max(0) };
            (start, l)
        }
    };
    items.iter().skip(start as usize).take(count.max(0) as usize).cloned().collect()
}

/// Inclusion: copy what the tree names, in the document's order.
fn include(
    node: &Node,
    doc: &Document,
    out: &mut Document,
    position: Option<usize>,
    cx: &EvalContext,
) -> Result<(), FilterError> {
    for (k, v) in doc {
        let Some(child) = node.get(k) else { continue };
        match &child.action {
            Some(Action::Include) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Action::Slice(skip, limit)) => {
                out.insert(k.clone(), match v {
                    Bson::Array(items) => Bson::Array(slice(items, *skip, *limit)),
                    other => other.clone(),
                });
            }
            Some(Action::ElemMatch(cond)) => {
                if let Bson::Array(items) = v {
                    if let Some(first) = items.iter().find(|i| cond.matches_element_in(i, cx)) {
                        out.insert(k.clone(), vec![first.clone()]);
                    }
                }
            }
            Some(Action::Positional) => match (v, position) {
                (Bson::Array(items), Some(p)) if p < items.len() => {
                    out.insert(k.clone(), vec![items[p].clone()]);
                }
                (Bson::Array(_), _) => {
                    return Err(err(
                        51246,
                        "Executor error during find command :: caused by :: positional operator '.$' couldn't find a matching element in the array",
                    ))
                }
                _ => {}
            },
            Some(Action::Exclude) | Some(Action::Literal(_)) | Some(Action::Computed(_)) => {}
            None => match v {
                Bson::Document(d) => {
                    let mut sub = Document::new();
                    include(child, d, &mut sub, position, cx)?;
                    out.insert(k.clone(), sub);
                }
                Bson::Array(items) => {
                    out.insert(k.clone(), include_array(child, items, position, cx)?);
                }
                _ => {}
            },
        }
    }
    Ok(())
}

fn include_array(
    node: &Node,
    items: &[Bson],
    position: Option<usize>,
    cx: &EvalContext,
) -> Result<Vec<Bson>, FilterError> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Bson::Document(d) => {
                let mut sub = Document::new();
                include(node, d, &mut sub, position, cx)?;
                out.push(Bson::Document(sub));
            }
            Bson::Array(inner) => out.push(Bson::Array(include_array(node, inner, position, cx)?)),
            _ => {}
        }
    }
    Ok(out)
}

/// Computed fields (literals, `$field` references), in projection order.
fn add_computed(node: &Node, doc: &Document, out: &mut Document, cx: &EvalContext) -> Result<(), FilterError> {
    for (k, child) in &node.children {
        match &child.action {
            Some(Action::Literal(v)) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Action::Computed(e)) => {
                if let Some(v) = e.eval_in(doc, cx)? {
                    out.insert(k.clone(), v);
                }
            }
            None if child.children.iter().any(|(_, c)| has_computed(c)) => {
                let mut sub = match out.get(k) {
                    Some(Bson::Document(d)) => d.clone(),
                    _ => Document::new(),
                };
                add_computed(child, doc, &mut sub, cx)?;
                out.insert(k.clone(), sub);
            }
            _ => {}
        }
    }
    Ok(())
}

fn has_computed(n: &Node) -> bool {
    matches!(n.action, Some(Action::Literal(_)) | Some(Action::Computed(_)))
        || n.children.iter().any(|(_, c)| has_computed(c))
}

/// Exclusion: copy everything but what the tree names.
fn exclude(node: &Node, doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        let Some(child) = node.get(k) else {
            out.insert(k.clone(), v.clone());
            continue;
        };
        match &child.action {
            Some(Action::Exclude) => {}
            Some(Action::Slice(skip, limit)) => {
                out.insert(
                    k.clone(),
                    match v {
                        Bson::Array(items) => Bson::Array(slice(items, *skip, *limit)),
                        other => other.clone(),
                    },
                );
            }
            Some(_) => {
                out.insert(k.clone(), v.clone());
            }
            None => {
                out.insert(k.clone(), exclude_value(child, v));
            }
        }
    }
    out
}

fn exclude_value(node: &Node, v: &Bson) -> Bson {
    match v {
        Bson::Document(d) => Bson::Document(exclude(node, d)),
        Bson::Array(items) => Bson::Array(items.iter().map(|i| exclude_value(node, i)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn p(spec: Document, d: Document) -> Document {
        Projection::parse(&spec).unwrap().apply(&d, None).unwrap()
    }

    /// An inclusion projection over only the fields it reads gives what it
    /// gives over the whole document.
    #[test]
    fn an_inclusion_reads_only_its_fields() {
        let d =
            doc! { "_id": 1, "a": 1, "b": { "c": 2, "d": 3 }, "e": [{ "c": 1, "x": 0 }, 5, { "x": 1 }], "s": "pad" };
        let cases = [
            (doc! { "b.c": 1, "a": 1 }, Some(vec!["_id", "b", "a"])),
            (doc! { "_id": 0, "e.x": 1, "t": { "$add": ["$a", 1] } }, Some(vec!["e", "t", "a"])),
            (
                doc! { "e": { "$slice": 1 }, "k": "$b.d", "lit": { "$literal": 5 } },
                Some(vec!["_id", "e", "k", "b", "lit"]),
            ),
            (doc! { "e": { "$elemMatch": { "x": 1 } } }, Some(vec!["_id", "e"])),
            (doc! { "_id": 1 }, Some(vec!["_id"])),
            (doc! { "whole": "$$ROOT" }, None),
            (doc! { "a": 0 }, None),
        ];
        for (spec, want) in cases {
            let projection = Projection::parse(&spec).unwrap();
            let want: Option<Vec<String>> = want.map(|w| w.into_iter().map(String::from).collect());
            assert_eq!(projection.reads().map(<[String]>::to_vec), want, "{spec}");
            let Some(names) = projection.reads() else { continue };
            let part = doc::bson_bytes::decode_fields(&doc::bson_bytes::encode(&d).unwrap(), names).unwrap();
            assert_eq!(projection.apply(&part, None).unwrap(), projection.apply(&d, None).unwrap(), "{spec}");
        }
    }

    #[test]
    fn inclusion_and_exclusion() {
        let d = doc! { "_id": 1, "a": 1, "b": { "c": 2, "d": 3 }, "e": [{ "c": 1, "x": 0 }, 5, { "x": 1 }] };
        assert_eq!(p(doc! { "b": 1, "a": 1 }, d.clone()), doc! { "_id": 1, "a": 1, "b": { "c": 2, "d": 3 } });
        assert_eq!(p(doc! { "a": 1, "_id": 0 }, d.clone()), doc! { "a": 1 });
        assert_eq!(p(doc! { "b.c": 1 }, d.clone()), doc! { "_id": 1, "b": { "c": 2 } });
        assert_eq!(p(doc! { "e.c": 1 }, d.clone()), doc! { "_id": 1, "e": [{ "c": 1 }, {}] });
        assert_eq!(p(doc! { "b": { "d": 1 } }, d.clone()), doc! { "_id": 1, "b": { "d": 3 } });
        assert_eq!(
            p(doc! { "a": 0, "b.c": 0 }, d.clone()),
            doc! { "_id": 1, "b": { "d": 3 }, "e": [{ "c": 1, "x": 0 }, 5, { "x": 1 }] }
        );
        assert_eq!(
            p(doc! { "e.x": 0, "_id": 0 }, d.clone()),
            doc! { "a": 1, "b": { "c": 2, "d": 3 }, "e": [{ "c": 1 }, 5, {}] }
        );
        assert_eq!(p(doc! { "_id": 1 }, d.clone()), doc! { "_id": 1 });
        assert_eq!(p(doc! { "_id": 0 }, doc! { "_id": 1, "a": 1 }), doc! { "a": 1 });
        assert_eq!(p(doc! { "a": 1, "z": "lit", "y": "$b.c" }, d), doc! { "_id": 1, "a": 1, "z": "lit", "y": 2 });
    }

    #[test]
    fn slice_elem_match_and_positional() {
        let d = doc! { "_id": 1, "a": [1, 2, 3, 4], "k": 0, "g": [{ "s": 1 }, { "s": 5 }, { "s": 7 }] };
        assert_eq!(p(doc! { "a": { "$slice": 2 } }, d.clone()).get_array("a").unwrap().len(), 2);
        assert!(p(doc! { "a": { "$slice": 2 } }, d.clone()).contains_key("k"), "$slice alone keeps other fields");
        assert_eq!(p(doc! { "a": { "$slice": -1 } }, d.clone()).get_array("a").unwrap(), &vec![Bson::Int32(4)]);
        assert_eq!(
            p(doc! { "a": { "$slice": [1, 2] } }, d.clone()).get_array("a").unwrap(),
            &vec![Bson::Int32(2), 3.into()]
        );
        assert_eq!(
            p(doc! { "g": { "$elemMatch": { "s": { "$gt": 4 } } } }, d.clone()),
            doc! { "_id": 1, "g": [{ "s": 5 }] }
        );
        // A value condition tests each element itself, as the filter's.
        assert_eq!(
            p(doc! { "n": { "$elemMatch": { "$gte": 1 } } }, doc! { "_id": 1, "n": [[2], 3] }),
            doc! { "_id": 1, "n": [3] }
        );
        let pos = Projection::parse(&doc! { "a.$": 1 }).unwrap();
        assert!(pos.is_positional());
        assert_eq!(pos.apply(&d, Some(2)).unwrap(), doc! { "_id": 1, "a": [3] });
    }

    #[test]
    fn invalid_mixes() {
        let code = |spec: Document| Projection::parse(&spec).unwrap_err().code;
        assert_eq!(code(doc! { "a": 1, "b": 0 }), 31254);
        assert_eq!(code(doc! { "a": 0, "b": 1 }), 31253);
        assert_eq!(code(doc! { "a": 1, "a.b": 1 }), 31249);
        assert_eq!(code(doc! { "a.b": 1, "a": 1 }), 31250);
        let e = Projection::parse(&doc! { "a": 1, "b": 0 }).unwrap_err();
        assert_eq!(e.message, "Cannot do exclusion on field b in inclusion projection");
    }
}
