//! The top-level fields a filter, projection, sort or pipeline reads: a
//! document decoded with only those fields (`doc::stored::Stored::fields`)
//! gives the same answer as the whole. `None` stands for the whole
//! document. A leaf: every reader of fields notes them through here.

/// Note that `path`'s first field is read (once); nothing when the whole
/// document is read already.
pub(crate) fn note(reads: &mut Option<Vec<String>>, path: &str) {
    let top = path.split('.').next().unwrap_or(path);
    if let Some(names) = reads.as_mut().filter(|names| !names.iter().any(|n| n == top)) {
        names.push(top.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_first_field_once_and_nothing_for_the_whole() {
        let mut reads = Some(Vec::new());
        for path in ["a.b", "c", "a", "a.0.x", ""] {
            note(&mut reads, path);
        }
        assert_eq!(reads, Some(vec!["a".to_string(), "c".to_string(), String::new()]));
        let mut whole = None;
        note(&mut whole, "a");
        assert_eq!(whole, None);
    }
}
