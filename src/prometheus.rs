//! The Prometheus text exposition format (version 0.0.4), as `GET /metrics` answers it (design
//! §27): families of gauges, each with its `# HELP` and `# TYPE` lines and its samples, label
//! values escaped as the format asks. Pure: what is measured is the API's to gather.

use std::fmt::Write;

/// One metric family being written: a gauge and its samples.
pub struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    /// A gauge named `name` (`orderly_...`), described by `help`.
    pub fn gauge(name: &'static str, help: &'static str) -> Family {
        Family { name, help, samples: Vec::new() }
    }

    /// A sample with `labels`.
    pub fn sample(mut self, labels: &[(&'static str, &str)], value: f64) -> Family {
        self.push(labels, value);
        self
    }

    /// Adds a sample in place.
    pub fn push(&mut self, labels: &[(&'static str, &str)], value: f64) {
        self.samples.push((labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect(), value));
    }
}

/// A label value as the format writes it: `\`, `"` and line feeds escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample's value: integers without a fraction, the rest as Rust prints them.
fn value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// `families` in the text format. A family without samples is still described (a scraper then
/// knows the metric exists and is empty now).
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help.replace('\\', "\\\\").replace('\n', "\\n"));
        let _ = writeln!(out, "# TYPE {} gauge", f.name);
        for (labels, v) in &f.samples {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", label(v))).collect();
            if labels.is_empty() {
                let _ = writeln!(out, "{} {}", f.name, value(*v));
            } else {
                let _ = writeln!(out, "{}{{{}}} {}", f.name, labels.join(","), value(*v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_with_help_type_and_escaped_labels() {
        let text = render(&[
            Family::gauge("orderly_jobs", "Jobs by status.").sample(&[("status", "DONE")], 3.0),
            Family::gauge("orderly_limit_running", "Running.").sample(&[("limit_key", "a\"b\\c\nd")], 1.5),
            Family::gauge("orderly_blocked_keys", "Blocked keys.").sample(&[], 0.0),
            Family::gauge("orderly_empty", "Nothing now."),
        ]);
        assert_eq!(
            text,
            "# HELP orderly_jobs Jobs by status.\n# TYPE orderly_jobs gauge\norderly_jobs{status=\"DONE\"} 3\n\
             # HELP orderly_limit_running Running.\n# TYPE orderly_limit_running gauge\n\
             orderly_limit_running{limit_key=\"a\\\"b\\\\c\\nd\"} 1.5\n\
             # HELP orderly_blocked_keys Blocked keys.\n# TYPE orderly_blocked_keys gauge\norderly_blocked_keys 0\n\
             # HELP orderly_empty Nothing now.\n# TYPE orderly_empty gauge\n"
        );
    }
}
