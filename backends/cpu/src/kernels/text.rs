//! String tensors: the string operators ([`TextOp`]) and data movement of strings.
//!
//! The data-movement kernels are generic over fixed-size elements; strings go through them
//! as i64 ids into a table of the distinct strings (interned, so that equal ids mean equal
//! strings and Equal can compare ids), and the ids are mapped back afterwards.

use super::{Inputs, Variant};
use crate::kernels::run;
use kiln::ir::infer::OutFact;
use kiln::{CaseChange, DataType, ElementwiseOp, HostTensor, LayerKind, TensorData, TextOp};
use std::collections::HashMap;

fn strings<'a>(t: &'a HostTensor, what: &str) -> Result<&'a [String], String> {
    t.as_strings().ok_or_else(|| format!("{what} must be a string tensor, not {}", t.dtype()))
}

fn tensor(shape: Vec<usize>, data: TensorData) -> Result<HostTensor, String> {
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// Whether `kind` only moves, selects or compares elements, so that it runs on string ids.
fn moves_elements(kind: &LayerKind) -> bool {
    matches!(
        kind,
        LayerKind::Identity
            | LayerKind::Shuffle(_)
            | LayerKind::Concatenation { .. }
            | LayerKind::Slice
            | LayerKind::Gather { .. }
            | LayerKind::Expand
            | LayerKind::Select
            | LayerKind::Elementwise { op: ElementwiseOp::Equal }
    )
}

/// Runs a data-movement layer with string inputs on interned ids.
pub(super) fn run_on_string_ids(
    kind: &LayerKind,
    inputs: &[Option<&HostTensor>],
    outs: &[OutFact],
    variant: Variant,
) -> Result<Vec<HostTensor>, String> {
    if !moves_elements(kind) {
        return Err(format!("{} layers are not defined on string tensors", kind.type_name()));
    }
    let mut table: Vec<String> = Vec::new();
    let mut ids: HashMap<&str, i64> = HashMap::new();
    let mut converted: Vec<Option<HostTensor>> = Vec::with_capacity(inputs.len());
    for input in inputs {
        converted.push(match input.and_then(|t| t.as_strings().map(|s| (t, s))) {
            Some((t, values)) => {
                let mut column = Vec::with_capacity(values.len());
                for s in values {
                    let id = *ids.entry(s.as_str()).or_insert_with(|| {
                        table.push(s.clone());
                        table.len() as i64 - 1
                    });
                    column.push(id);
                }
                Some(tensor(t.shape().to_vec(), TensorData::I64(column))?)
            }
            None => None,
        });
    }
    let id_inputs: Vec<Option<&HostTensor>> =
        inputs.iter().zip(&converted).map(|(original, id)| id.as_ref().or(*original)).collect();
    let id_outs: Vec<OutFact> = outs
        .iter()
        .map(|o| OutFact { dtype: if o.dtype.is_string() { DataType::I64 } else { o.dtype }, ..o.clone() })
        .collect();
    let results = run(kind, &id_inputs, &id_outs, variant)?;
    results
        .into_iter()
        .zip(outs)
        .map(|(r, fact)| {
            if !fact.dtype.is_string() {
                return Ok(r);
            }
            let shape = r.shape().to_vec();
            let TensorData::I64(column) = r.into_data() else {
                return Err("a string id kernel gave non-id output".to_string());
            };
            let values = column
                .iter()
                .map(|&id| table.get(id as usize).cloned().ok_or_else(|| format!("string id {id} is out of range")))
                .collect::<Result<Vec<_>, _>>()?;
            tensor(shape, TensorData::String(values))
        })
        .collect()
}

pub(super) fn text(op: &TextOp, ins: &Inputs, outs: &[OutFact]) -> Result<Vec<HostTensor>, String> {
    match op {
        TextOp::Normalize { case_change, case_sensitive, stopwords } => {
            Ok(vec![normalize(ins.req(0)?, *case_change, *case_sensitive, stopwords)?])
        }
        TextOp::Concat => Ok(vec![concat(ins.req(0)?, ins.req(1)?, super::first_shape(outs)?)?]),
        TextOp::Split { delimiter, max_split } => split(ins.req(0)?, delimiter.as_deref(), *max_split),
        TextOp::RegexFullMatch { pattern } => Ok(vec![regex_full_match(ins.req(0)?, pattern)?]),
    }
}

fn change_case(s: &str, case: CaseChange) -> String {
    match case {
        CaseChange::None => s.to_string(),
        CaseChange::Lower => s.to_lowercase(),
        CaseChange::Upper => s.to_uppercase(),
    }
}

/// The words of `text` (split at single spaces) that are not stopwords, rejoined.
fn remove_stopwords(text: &str, stops: &[String]) -> String {
    text.split(' ').filter(|w| !stops.iter().any(|s| s == w)).collect::<Vec<_>>().join(" ")
}

/// ONNX StringNormalizer as its reference implementation does it: stopwords are removed
/// word by word (words split at spaces) before the case change when case-sensitive, after
/// it (against case-changed stopwords) otherwise; empty results are then dropped, leaving
/// one empty string when nothing remains.
fn normalize(x: &HostTensor, case: CaseChange, case_sensitive: bool, stopwords: &[String]) -> Result<HostTensor, String> {
    let values = strings(x, "StringNormalizer input")?;
    let changed_stops: Vec<String> = stopwords.iter().map(|w| change_case(w, case)).collect();
    let normalized: Vec<String> = values
        .iter()
        .map(|s| {
            let kept = if case_sensitive && !stopwords.is_empty() { remove_stopwords(s, stopwords) } else { s.clone() };
            let changed = change_case(&kept, case);
            if !case_sensitive && !stopwords.is_empty() {
                remove_stopwords(&changed, &changed_stops)
            } else {
                changed
            }
        })
        .collect();
    let rank = x.shape().len();
    if rank == 2 && x.shape()[0] != 1 {
        // The reference keeps a (N>1, C) matrix's shape (it drops empty strings only for one row).
        return tensor(x.shape().to_vec(), TensorData::String(normalized));
    }
    let mut kept: Vec<String> = normalized.into_iter().filter(|s| !s.is_empty()).collect();
    if kept.is_empty() {
        kept.push(String::new());
    }
    let shape = if rank == 2 { vec![1, kept.len()] } else { vec![kept.len()] };
    tensor(shape, TensorData::String(kept))
}

/// `shape` is the broadcast shape (from shape inference).
fn concat(a: &HostTensor, b: &HostTensor, shape: Vec<usize>) -> Result<HostTensor, String> {
    let (va, vb) = (strings(a, "StringConcat input 1")?, strings(b, "StringConcat input 2")?);
    let (ia, ib) = (broadcast_index(a.shape(), &shape), broadcast_index(b.shape(), &shape));
    let out = (0..shape.iter().product::<usize>()).map(|i| format!("{}{}", va[ia(i)], vb[ib(i)])).collect();
    tensor(shape, TensorData::String(out))
}

/// Maps a flat index of the broadcast `out` shape to the flat index in `shape`.
fn broadcast_index(shape: &[usize], out: &[usize]) -> impl Fn(usize) -> usize {
    let lead = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    let mut stride = 1;
    for axis in (0..shape.len()).rev() {
        strides[lead + axis] = if shape[axis] == 1 { 0 } else { stride };
        stride *= shape[axis];
    }
    let out = out.to_vec();
    move |mut flat| {
        let mut index = 0;
        for axis in (0..out.len()).rev() {
            index += (flat % out[axis]) * strides[axis];
            flat /= out[axis];
        }
        index
    }
}

/// Python's `str.split(delimiter, max_split)`: at whitespace runs (ignoring leading and
/// trailing whitespace) when `delimiter` is `None`.
fn split_one(s: &str, delimiter: Option<&str>, max_split: Option<usize>) -> Vec<String> {
    let limit = max_split.unwrap_or(usize::MAX);
    match delimiter {
        Some(d) => {
            let parts = limit.saturating_add(1);
            s.splitn(parts, d).map(str::to_string).collect()
        }
        None => {
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if out.len() == limit {
                    out.push(rest.to_string());
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start();
            }
            out
        }
    }
}

fn split(x: &HostTensor, delimiter: Option<&str>, max_split: Option<usize>) -> Result<Vec<HostTensor>, String> {
    let values = strings(x, "StringSplit input")?;
    let parts: Vec<Vec<String>> = values.iter().map(|s| split_one(s, delimiter, max_split)).collect();
    let width = parts.iter().map(Vec::len).max().unwrap_or(0);
    let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
    let mut tokens = Vec::with_capacity(parts.len() * width);
    for mut p in parts {
        p.resize(width, String::new());
        tokens.extend(p);
    }
    let mut shape = x.shape().to_vec();
    let counts = tensor(shape.clone(), TensorData::I64(counts))?;
    shape.push(width);
    Ok(vec![tensor(shape, TensorData::String(tokens))?, counts])
}

fn regex_full_match(x: &HostTensor, pattern: &str) -> Result<HostTensor, String> {
    let values = strings(x, "RegexFullMatch input")?;
    let anchored = format!(r"\A(?:{pattern})\z");
    let re = regex::Regex::new(&anchored).map_err(|e| format!("RegexFullMatch pattern `{pattern}` is invalid: {e}"))?;
    tensor(x.shape().to_vec(), TensorData::Bool(values.iter().map(|s| re.is_match(s)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_matches_python_str_split() {
        assert_eq!(split_one("  a b  c ", None, None), ["a", "b", "c"]);
        assert_eq!(split_one("  a b  c ", None, Some(1)), ["a", "b  c "]);
        assert_eq!(split_one("a,,b", Some(","), None), ["a", "", "b"]);
        assert_eq!(split_one("a,b,c", Some(","), Some(1)), ["a", "b,c"]);
        assert_eq!(split_one("", None, None), Vec::<String>::new());
        assert_eq!(split_one("", Some(","), None), [""]);
    }

    #[test]
    fn stopwords_are_removed_word_by_word() {
        assert_eq!(remove_stopwords("monday is here", &["monday".into()]), "is here");
        assert_eq!(remove_stopwords("monday", &["monday".into()]), "");
    }
}
