//! The mutation table (`tests/mutants.json`, `npm run mutants`) stays runnable: every mutant's text
//! is found exactly once in its file, so a refactor that moves the text fails here, at once, not
//! in the next full mutation run.

#[test]
fn every_mutants_text_is_found_exactly_once_in_its_file() {
    let root = env!("CARGO_MANIFEST_DIR");
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/tests/mutants.json")).unwrap()).unwrap();
    let mut stale = Vec::new();
    for m in table["mutants"].as_array().unwrap() {
        let (id, file, find) = (m["id"].as_str().unwrap(), m["file"].as_str().unwrap(), m["find"].as_str().unwrap());
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap_or_default();
        let found = text.matches(find).count();
        if found != 1 {
            stale.push(format!("{id}: found {found} times in {file}"));
        }
    }
    assert!(stale.is_empty(), "stale mutants:\n{}", stale.join("\n"));
}
