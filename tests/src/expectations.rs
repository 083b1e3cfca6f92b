//! The checked-in list of cases expected to fail on a backend, each with a reason.
//!
//! Format: one case per line, `suite/test_name  reason`; `## ` lines start a category
//! (the reasons below them share it), other `#` lines and blank lines are comments.

use crate::run::CaseError;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub category: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    pub entries: BTreeMap<String, Expected>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct ExpectationsError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ExpectationsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl Expectations {
    pub fn parse(text: &str) -> Result<Expectations, ExpectationsError> {
        let mut entries = BTreeMap::new();
        let mut category = String::from("uncategorized");
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            let error = |message: String| ExpectationsError { line: index + 1, message };
            if let Some(header) = line.strip_prefix("## ") {
                category = without_count(header.trim()).to_string();
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (id, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let reason = reason.trim();
            if !id.contains('/') {
                return Err(error(format!("`{id}` is not `suite/test_name`")));
            }
            if reason.is_empty() {
                return Err(error(format!("`{id}` has no reason")));
            }
            let entry = Expected { category: category.clone(), reason: reason.to_string() };
            if entries.insert(id.to_string(), entry).is_some() {
                return Err(error(format!("`{id}` is listed twice")));
            }
        }
        Ok(Expectations { entries })
    }

    pub fn get(&self, id: &str) -> Option<&Expected> {
        self.entries.get(id)
    }

    /// The file text: a header, then the cases grouped by category.
    pub fn render(&self, backend: &str) -> String {
        let mut by_category: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        for (id, e) in &self.entries {
            by_category.entry(&e.category).or_default().push((id, &e.reason));
        }
        let mut text = format!(
            "# ONNX backend test cases expected to fail on the {backend} backend (onnx 1.23.2).\n\
             # One case per line: `suite/test_name  reason`; `## ` starts a category.\n\
             # The conformance run fails when a listed case passes (delete its line) or an\n\
             # unlisted case fails. KILN_CONFORMANCE_BLESS=1 rewrites this file from a run.\n"
        );
        for (category, cases) in by_category {
            let _ = write!(text, "\n## {category} ({})\n", cases.len());
            for (id, reason) in cases {
                let _ = writeln!(text, "{id}  {reason}");
            }
        }
        text
    }

    /// Count of cases per category.
    pub fn category_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for e in self.entries.values() {
            *counts.entry(e.category.clone()).or_insert(0) += 1;
        }
        counts
    }
}

/// `name (12)` → `name`: the count that [`Expectations::render`] appends.
fn without_count(header: &str) -> &str {
    match header.rsplit_once(" (") {
        Some((name, count)) if count.strip_suffix(')').is_some_and(|c| c.chars().all(|d| d.is_ascii_digit())) => name,
        _ => header,
    }
}

/// A category for a failure, from the stage and the message (used when blessing).
pub fn categorize(error: &CaseError) -> &'static str {
    let text = error.to_string();
    let has = |s: &str| text.contains(s);
    let op_is = |ops: &[&str]| ops.iter().any(|op| has(&format!("ONNX op `{op}`")));
    match error {
        CaseError::Values(_) => "wrong values",
        _ if has("element type") && (has("not supported by kiln") || has("unknown ONNX element type")) => {
            "element type outside kiln's set (fp8, 4-bit, string, complex)"
        }
        CaseError::Data(_) => "test data kiln cannot read",
        _ if has("domain `ai.onnx.preview") || has("domain `ai.onnx.ml") => "op of a non-default domain",
        _ if op_is(&["Loop", "If", "Scan", "LSTM", "GRU", "RNN", "OptionalHasElement", "OptionalGetElement"])
            || has("ONNX op `Sequence")
            || has("ONNX op `SplitToSequence")
            || has("ONNX op `ConcatFromSequence") =>
        {
            "control flow, recurrent and sequence ops (issue #3)"
        }
        _ if op_is(&[
            "RandomUniformLike",
            "RandomNormalLike",
            "RandomUniform",
            "RandomNormal",
            "Bernoulli",
            "Multinomial",
        ]) || has("random masks") =>
        {
            "random ops (declared unsupported)"
        }
        _ if has("unsupported ONNX op") => "op not implemented",
        _ if has("computed at run time") || has("must have a fixed length") => {
            "parameter computed at run time (kiln needs it constant)"
        }
        _ if has("training_mode") => "training mode",
        _ if has("loops and conditionals") => "control flow, recurrent and sequence ops (issue #3)",
        CaseError::Import(_) => "attribute or op variant not supported",
        CaseError::Build(_) => "builder limitation",
        CaseError::Run(_) => "cpu kernel limitation",
    }
}

/// The error's message, shortened for one line of the expectations file.
pub fn short_reason(error: &CaseError) -> String {
    let text = error.to_string();
    let mut reason: String = text.chars().take(200).collect();
    if reason.len() < text.len() {
        reason.push('…');
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_categories_and_reasons() {
        let text = "# header\n\n## unsupported op\nnode/test_a  op `A` is missing\nnode/test_b\tno kernel\n";
        let e = Expectations::parse(text).unwrap();
        assert_eq!(e.entries.len(), 2);
        assert_eq!(e.get("node/test_b").unwrap().reason, "no kernel");
        assert_eq!(e.get("node/test_a").unwrap().category, "unsupported op");
    }

    #[test]
    fn rejects_missing_reasons_duplicates_and_bare_names() {
        assert_eq!(Expectations::parse("node/test_a\n").unwrap_err().line, 1);
        let twice = Expectations::parse("node/t  x\nnode/t  y\n").unwrap_err();
        assert!(twice.message.contains("twice"), "{}", twice.message);
        assert!(Expectations::parse("test_a reason\n").is_err());
    }

    #[test]
    fn render_round_trips() {
        let e = Expectations::parse("## b\nnode/x  why x\n## a\nnode/y  why y\n").unwrap();
        let text = e.render("cpu");
        assert!(text.find("## a (1)").unwrap() < text.find("## b (1)").unwrap());
        assert_eq!(Expectations::parse(&text).unwrap(), e);
    }
}
