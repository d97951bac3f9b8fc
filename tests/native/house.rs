//! The house rules of `src/`, checked on every test run so they hold without anyone remembering
//! them (design §18): the ledger alone holds SQL, errors are typed, functions fit in the head, and
//! the modules import one way only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function of `src/` may be, tests aside.
const MAX_FN_LINES: usize = 70;
/// Files of `src/` that are tests: compiled only into the unit tests (`#[cfg(test)] mod ...;`),
/// or only with the `testing` feature (the conformance suite, which the D1 fixture worker runs too).
const TEST_ONLY: &[&str] = &["src/ledger/params.rs", "src/ledger/conformance.rs"];

fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("src/") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|p| !TEST_ONLY.iter().any(|t| p.ends_with(t)))
        .map(|p| {
            let rel = p.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(&p).expect("readable"))
        })
        .collect()
}

/// The text of a file before its `#[cfg(test)]` module (tests may be as long as they like).
fn code(text: &str) -> &str {
    text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text)
}

/// Lines that are code, not comments.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    code(text).lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim_start().starts_with("//"))
}

#[test]
fn outside_the_ledger_no_file_sees_a_statement_or_a_row() {
    let found = sql_outside_the_ledger(&sources());
    assert!(found.is_empty(), "SQL outside src/ledger/:\n{}", found.join("\n"));
}

/// Lines outside `src/ledger/` that name a statement, a batch or a row.
fn sql_outside_the_ledger(sources: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, text) in sources.iter().filter(|(f, _)| !f.starts_with("src/ledger/")) {
        for (n, line) in code_lines(text) {
            for word in ["Stmt", "Sql::batch", "stmt::", ".batch(vec", "Row"] {
                let hit = match word {
                    // `Row` as a type, not inside a longer name.
                    "Row" => line.match_indices("Row").any(|(i, _)| {
                        !line[..i].ends_with(char::is_alphanumeric) && !line[i + 3..].starts_with(char::is_alphanumeric)
                    }),
                    w => line.contains(w),
                };
                if hit {
                    found.push(format!("{file}:{n}: {word}: {}", line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn errors_are_types_not_strings_or_status_pairs() {
    let found = untyped_errors(&sources());
    assert!(found.is_empty(), "untyped errors:\n{}", found.join("\n"));
}

/// Lines whose error is a string or a (status, string) pair.
fn untyped_errors(sources: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, text) in sources {
        for (n, line) in code_lines(text) {
            let squeezed: String = line.split_whitespace().collect();
            if squeezed.contains("(u16,String)") || (squeezed.contains("Result<") && squeezed.contains(",String>")) {
                found.push(format!("{file}:{n}: {}", line.trim()));
            }
        }
    }
    found
}

/// Each `fn` of a file with how many lines it spans (its signature to its closing brace, found by
/// indentation: rustfmt closes a function at the column it opened).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code(text).lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let is_fn = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) async fn ",
            "pub(super) async fn ",
            "const fn ",
            "pub const fn ",
        ]
        .iter()
        .any(|p| t.starts_with(p));
        if !is_fn || t.ends_with(';') {
            continue;
        }
        let indent = line.len() - t.len();
        let name = t.split("fn ").nth(1).unwrap_or_default().split(['(', '<']).next().unwrap_or_default().to_string();
        if t.ends_with('}') && t.matches('{').count() == t.matches('}').count() {
            out.push((name, i + 1, 1)); // A function on one line: `fn f() {}`.
            continue;
        }
        let end = lines[i..]
            .iter()
            .position(|l| l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}'))
            .map(|p| i + p);
        if let Some(end) = end {
            if lines[i..=end].iter().any(|l| l.contains('{')) {
                out.push((name, i + 1, end - i + 1));
            }
        }
    }
    out
}

#[test]
fn no_function_is_too_long_to_hold_in_the_head() {
    let long = long_functions(&sources());
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
}

/// Functions over [`MAX_FN_LINES`] lines.
fn long_functions(sources: &[(String, String)]) -> Vec<String> {
    let mut long = Vec::new();
    for (file, text) in sources {
        for (name, line, len) in functions(text) {
            if len > MAX_FN_LINES {
                long.push(format!("{file}:{line}: {name} is {len} lines"));
            }
        }
    }
    long
}

/// The module a file is (`consumer/locked.rs` is `consumer`: a folder is one module to the rest).
fn module_of(file: &str) -> String {
    let rel = file.trim_start_matches("src/").trim_end_matches(".rs");
    rel.split('/').next().unwrap_or(rel).to_string()
}

/// Which top-level modules each top-level module imports (`use crate::x`, `crate::x::` paths).
fn imports(sources: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in sources {
        let from = module_of(file);
        if from == "lib" {
            continue;
        }
        let deps = graph.entry(from.clone()).or_default();
        for (_, line) in code_lines(text) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let to: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !to.is_empty() && to != from {
                    deps.insert(to);
                }
            }
            // `use crate::{a, b::c}`
            if let Some(list) = line.trim().strip_prefix("use crate::{") {
                for part in list.split(',') {
                    let to: String = part.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !to.is_empty() && to != from {
                        deps.insert(to);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn the_modules_import_one_way_only() {
    if let Some(cycle) = import_cycle(&sources()) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

/// A cycle among the top-level modules' imports, as its path, if there is one.
fn import_cycle(sources: &[(String, String)]) -> Option<Vec<String>> {
    cycle_in(&imports(sources))
}

/// A cycle in `graph`, as its path, if there is one (depth-first).
fn cycle_in(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_files_of_a_folder_call_down_only_never_back_up_to_their_parent() {
    if let Some(cycle) = file_cycle(&sources()) {
        panic!("import cycle between files: {}", cycle.join(" -> "));
    }
}

/// A cycle among the files of a folder module (`src/consumer/`, `src/ledger/`, ...), if there is
/// one: see [`file_imports`].
fn file_cycle(sources: &[(String, String)]) -> Option<Vec<String>> {
    cycle_in(&file_imports(sources))
}

/// Which files of its own folder each file of a folder module depends on. A parent (`mod.rs`)
/// depends on each child it declares (`mod child;`): it calls down into them, often through
/// methods the child adds, which no import shows. A child depends on a sibling it names
/// (`super::sibling::x`, `crate::folder::sibling::x`), and on its parent when it names anything
/// else there (`super::X`, `super::*`, `crate::folder::X`), re-exports included: so a child that
/// uses anything of its parent's is a cycle, and shared types live in a leaf file of their own.
fn file_imports(sources: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in sources {
        let Some((folder, name)) = file.strip_suffix(".rs").and_then(|f| f.rsplit_once('/')) else { continue };
        if folder == "src" {
            continue;
        }
        let sibling = |n: &str| sources.iter().any(|(f, _)| f == &format!("{folder}/{n}.rs")) && n != "mod";
        let parent = format!("{folder}/mod.rs");
        let deps = graph.entry(file.clone()).or_default();
        let text_code = code_lines(text).map(|(_, l)| l).collect::<Vec<_>>().join("\n");
        if name == "mod" {
            for line in text_code.lines() {
                let t = line.trim();
                let decl = t.strip_prefix("pub ").or_else(|| t.strip_prefix("pub(crate) ")).unwrap_or(t);
                if let Some(child) = decl.strip_prefix("mod ").and_then(|c| c.strip_suffix(';')) {
                    if sibling(child) {
                        deps.insert(format!("{folder}/{child}.rs"));
                    }
                }
            }
            continue;
        }
        // A method the parent defines, called on `self` (`impl` blocks over one type span the
        // folder's files, and a method call shows in no import), unless this file or a sibling
        // defines one of that name.
        let parent_fns = sources.iter().find(|(f, _)| *f == parent).map(|(_, t)| fn_names(code(t))).unwrap_or_default();
        let folder_fns: BTreeSet<String> = sources
            .iter()
            .filter(|(f, _)| {
                f.starts_with(&format!("{folder}/")) && *f != parent && !f[folder.len() + 1..].contains('/')
            })
            .flat_map(|(_, t)| fn_names(code(t)))
            .collect();
        if parent_fns.iter().any(|n| !folder_fns.contains(n) && text_code.contains(&format!("self.{n}("))) {
            deps.insert(parent.clone());
        }
        let crate_path = format!("crate::{}::", folder.trim_start_matches("src/"));
        for prefix in ["super::", crate_path.as_str()] {
            for (i, _) in text_code.match_indices(prefix) {
                for named in first_names(&text_code[i + prefix.len()..]) {
                    deps.insert(if sibling(&named) { format!("{folder}/{named}.rs") } else { parent.clone() });
                }
            }
        }
    }
    graph
}

/// The names of the functions a file's code defines.
fn fn_names(code: &str) -> BTreeSet<String> {
    code.match_indices("fn ")
        .filter(|(i, _)| *i == 0 || !code.as_bytes()[i - 1].is_ascii_alphanumeric() && code.as_bytes()[i - 1] != b'_')
        .map(|(i, _)| code[i + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The first name of each path after `super::`: `a` of `a::b`, `a` and `B` of `{a::x, B}`, `*`.
fn first_names(rest: &str) -> Vec<String> {
    let name = |s: &str| -> String {
        s.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '*').collect()
    };
    let Some(list) = rest.strip_prefix('{') else { return vec![name(rest)] };
    let (mut depth, mut items, mut start) = (0, Vec::new(), 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&list[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.into_iter().map(name).filter(|n| !n.is_empty()).collect()
}

#[test]
fn each_check_finds_what_it_looks_for() {
    let file = |path: &str, text: &str| vec![(path.to_string(), text.to_string())];
    // Function length, and how a function's extent is found.
    let long = format!("fn long() {{\n{}}}\n", "    let x = 1;\n".repeat(MAX_FN_LINES));
    assert_eq!(functions(&long), vec![("long".to_string(), 1, MAX_FN_LINES + 2)]);
    assert_eq!(
        long_functions(&file("src/a.rs", &long)),
        vec![format!("src/a.rs:1: long is {} lines", MAX_FN_LINES + 2)]
    );
    let nested = "impl A {\n    pub async fn f(&self) {\n        if x {\n        }\n    }\n}\n";
    assert_eq!(functions(nested), vec![("f".to_string(), 2, 4)]);
    let one_line = "fn quiet(_: &str) {}\n\nimpl A {\n    fn g() {\n    }\n}\n";
    assert_eq!(functions(one_line), vec![("quiet".to_string(), 1, 1), ("g".to_string(), 4, 2)]);
    // SQL outside the ledger: seen in src/api/, not in src/ledger/, not in a comment.
    let sql = "fn f() {\n    let s = Stmt::bind(\"SELECT 1\", []);\n    // a Row in a comment\n}\n";
    assert_eq!(sql_outside_the_ledger(&file("src/api/x.rs", sql)).len(), 1);
    assert!(sql_outside_the_ledger(&file("src/ledger/x.rs", sql)).is_empty());
    assert!(sql_outside_the_ledger(&file("src/api/x.rs", "struct Rows;\nfn Rowan() {}\n")).is_empty(), "longer names");
    // Untyped errors.
    for bad in ["fn f() -> Result<(), String> {}", "fn f() -> (u16, String) {}"] {
        assert_eq!(untyped_errors(&file("src/a.rs", bad)).len(), 1, "{bad}");
    }
    assert!(untyped_errors(&file("src/a.rs", "fn f() -> Result<String, ApiError> {}")).is_empty());
    // Import cycles between top-level modules, a folder being one module.
    assert_eq!(module_of("src/consumer/locked.rs"), "consumer");
    let cycle = [
        ("src/a.rs".to_string(), "use crate::b::x;".to_string()),
        ("src/b/mod.rs".to_string(), "use crate::{c, d};".to_string()),
        ("src/c.rs".to_string(), "fn f() { crate::a::g() }".to_string()),
    ];
    assert_eq!(import_cycle(&cycle), Some(vec!["a", "b", "c", "a"].into_iter().map(String::from).collect()));
    assert_eq!(import_cycle(&cycle[..2]), None, "without c's call back up");
    // Cycles between the files of a folder: a child naming its parent, or siblings each other.
    let src = |files: &[(&str, &str)]| files.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect::<Vec<_>>();
    let folder = src(&[
        ("src/q/mod.rs", "mod low;\npub mod mode;\npub use low::Ports;\n"),
        ("src/q/mode.rs", "use super::low::{self, Ports};\nuse crate::q::low::x;\n"),
        ("src/q/low.rs", "pub struct Ports;\n"),
    ]);
    assert_eq!(first_names("{\n    a::{b, c}, D,\n};"), vec!["a", "D"]);
    assert_eq!(file_cycle(&folder), None, "down only");
    let up = |text: &str| {
        let mut files = folder.clone();
        files[2].1 = text.to_string();
        file_cycle(&files)
    };
    let back = Some(vec!["src/q/low.rs", "src/q/mod.rs", "src/q/low.rs"].into_iter().map(String::from).collect());
    assert_eq!(up("use super::{\n    Ports,\n};\n"), back, "a re-export of the parent's is the parent's");
    assert_eq!(up("impl super::Thing {}\n"), back);
    assert_eq!(up("fn f() { crate::q::helper() }\n"), back);
    assert_eq!(up("// super::Ports in a comment\npub(super) fn f() {}\n"), None);
    // A call of a method the parent defines, on `self`, is a call up too; one a sibling or the
    // file itself defines is not.
    let mut with_method = folder.clone();
    with_method[0].1.push_str("impl Ports {\n    fn decide(&self) {}\n}\n");
    with_method[2].1 = "fn low(&self) { self.decide(); }\n".to_string();
    assert_eq!(file_cycle(&with_method), back);
    with_method[2].1 = "fn decide(&self) {}\nfn low(&self) { self.decide(); self.ports.decide(); }\n".to_string();
    assert_eq!(file_cycle(&with_method), None);
    let sideways = Some(vec!["src/q/low.rs", "src/q/mode.rs", "src/q/low.rs"].into_iter().map(String::from).collect());
    assert_eq!(up("use super::mode::Plan;\n"), sideways);
}
