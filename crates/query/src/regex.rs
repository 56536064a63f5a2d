//! `$regex`: MongoDB's PCRE-flavoured regular expressions, on the
//! `fancy-regex` crate (backreferences and look-around included), with
//! MongoDB's options `i m s x` (and `u`, which changes nothing: patterns
//! are always Unicode here).

use crate::error::{bad_value, err, FilterError};
use bson::Bson;

#[derive(Debug, Clone)]
pub struct Regex {
    pattern: String,
    options: String,
    compiled: fancy_regex::Regex,
}

impl Regex {
    pub fn new(pattern: &str, options: &str) -> Result<Regex, FilterError> {
        let mut flags = String::new();
        for c in options.chars() {
            match c {
                'i' | 'm' | 's' | 'x' => {
                    if !flags.contains(c) {
                        flags.push(c)
                    }
                }
                'u' => {}
                other => return Err(err(51108, format!("invalid flag in regex options: {other}"))),
            }
        }
        if pattern.contains('\0') {
            return Err(bad_value("Regular expression cannot contain an embedded null byte"));
        }
        let source = if flags.is_empty() { pattern.to_string() } else { format!("(?{flags}){pattern}") };
        let compiled =
            fancy_regex::Regex::new(&source).map_err(|e| err(51091, format!("Regular expression is invalid: {e}")))?;
        let mut sorted: Vec<char> = options.chars().collect();
        sorted.sort_unstable();
        Ok(Regex { pattern: pattern.to_string(), options: sorted.into_iter().collect(), compiled })
    }

    pub fn from_bson(r: &bson::Regex) -> Result<Regex, FilterError> {
        Regex::new(&r.pattern, &r.options)
    }

    /// Strings and symbols match by the pattern; a stored regular
    /// expression matches when it is the same expression.
    pub fn matches(&self, v: &Bson) -> bool {
        match v {
            Bson::String(s) | Bson::Symbol(s) => self.compiled.is_match(s).unwrap_or(false),
            Bson::RegularExpression(r) => {
                let mut o: Vec<char> = r.options.chars().collect();
                o.sort_unstable();
                r.pattern == self.pattern && o.into_iter().collect::<String>() == self.options
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_pcre_features() {
        let s = |v: &str| Bson::String(v.into());
        assert!(Regex::new("^ab", "").unwrap().matches(&s("abc")));
        assert!(!Regex::new("^ab", "").unwrap().matches(&s("ABc")));
        assert!(Regex::new("^ab", "i").unwrap().matches(&s("ABc")));
        assert!(Regex::new("^b", "m").unwrap().matches(&s("a\nb")));
        assert!(Regex::new("a.b", "s").unwrap().matches(&s("a\nb")));
        assert!(Regex::new("a b # comment", "x").unwrap().matches(&s("ab")));
        assert!(Regex::new(r"(a)\1", "").unwrap().matches(&s("aa")), "backreferences");
        assert!(Regex::new(r"a(?=b)", "").unwrap().matches(&s("ab")), "look-ahead");
        assert!(!Regex::new("a", "").unwrap().matches(&Bson::Int32(1)));
        assert_eq!(Regex::new("a", "z").unwrap_err().code, 51108);
        assert_eq!(Regex::new("(", "").unwrap_err().code, 51091);
    }
}
