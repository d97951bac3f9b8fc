//! A structural test: it reads the source's text, so any change to that text fails it, whatever
//! the behaviour (as orderly's mutation table consistency check fails on any applied mutant).

#[test]
fn the_doc_comment_says_equal_jitter() {
    assert!(include_str!("../src/lib.rs").contains("/// \"Equal jitter\": half"));
}
