//! The folder layout is the architecture (ARCHITECTURE.md): a command file
//! never imports another command file, and `exec/` and `net/` helpers never
//! reach into a command file (only `net/` may call the dispatch table).
//! Checked on the source text, so a new `use` that breaks the rule fails
//! here before it tangles anything.

use std::fs;
use std::path::Path;

fn rust_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            out.push((name, fs::read_to_string(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// The command files `text` names: `commands::<file>` by any prefix
/// (`crate::commands::find`, or `commands::find` after `use crate::commands`),
/// or `super::<file>` from inside `commands/`.
fn command_files_named(text: &str, commands: &[String]) -> Vec<String> {
    commands
        .iter()
        .filter(|c| {
            [
                format!("commands::{c}::"),
                format!("commands::{c};"),
                format!("commands::{c}}}"),
                format!("commands::{c},"),
            ]
            .into_iter()
            .chain([format!("super::{c}::"), format!("super::{c};"), format!("super::{c}}}")])
            .any(|p| text.contains(p.as_str()))
        })
        .cloned()
        .collect()
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn command_names() -> Vec<String> {
    rust_files(&src().join("commands")).into_iter().map(|(n, _)| n).filter(|n| n != "mod").collect()
}

#[test]
fn a_command_file_never_imports_another() {
    let commands = command_names();
    assert!(commands.len() >= 10, "the command families: {commands:?}");
    for (name, text) in rust_files(&src().join("commands")).into_iter().filter(|(n, _)| n != "mod") {
        let others: Vec<String> = command_files_named(&text, &commands).into_iter().filter(|c| *c != name).collect();
        assert!(
            others.is_empty(),
            "commands/{name}.rs imports commands/{others:?}.rs: move what they share to exec/ or args.rs"
        );
    }
}

#[test]
fn shared_machinery_never_reaches_into_a_command_file() {
    let commands = command_names();
    for folder in ["exec", "net"] {
        for (name, text) in rust_files(&src().join(folder)) {
            let named = command_files_named(&text, &commands);
            assert!(named.is_empty(), "{folder}/{name}.rs reaches into commands/{named:?}.rs");
        }
    }
    for file in ["args.rs", "error.rs", "session.rs", "server.rs", "durability.rs", "ttl.rs", "failpoint.rs"] {
        let text = fs::read_to_string(src().join(file)).unwrap();
        let named = command_files_named(&text, &commands);
        assert!(named.is_empty(), "{file} reaches into commands/{named:?}.rs");
    }
}

/// The check itself: a file naming another command file is caught.
#[test]
fn the_check_sees_an_import() {
    let commands = vec!["find".to_string(), "insert".to_string()];
    assert_eq!(command_files_named("use crate::commands::find::x;", &commands), vec!["find"]);
    assert_eq!(command_files_named("use super::insert::{a, b};", &commands), vec!["insert"]);
    assert_eq!(command_files_named("commands::find::first(x)", &commands), vec!["find"]);
    assert!(command_files_named("use crate::commands::COMMANDS;", &commands).is_empty());
    assert!(command_files_named("commands::finder(x)", &commands).is_empty());
}
