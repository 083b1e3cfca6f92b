//! String operators: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{CaseChange, LayerKind, TensorId, TextOp};

pub(super) fn register(r: &mut Registry) {
    r.add("StringNormalizer", &[10], normalizer);
    r.add("StringConcat", &[20], concat);
    r.add("StringSplit", &[20], split);
    r.add("RegexFullMatch", &[20], regex_full_match);
}

fn normalizer(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let case_change = match ctx.attrs.string("case_change_action", "NONE")? {
        "NONE" => CaseChange::None,
        "LOWER" => CaseChange::Lower,
        "UPPER" => CaseChange::Upper,
        other => return Err(ctx.invalid(format!("case_change_action `{other}` is not NONE, LOWER or UPPER"))),
    };
    let case_sensitive = ctx.attrs.flag("is_case_sensitive", false)?;
    // Case changes follow Unicode's default rules, whatever `locale` names.
    let stopwords = ctx.attrs.strings("stopwords")?.unwrap_or_default().into_iter().map(str::to_string).collect();
    let x = ctx.input(0)?;
    let op = TextOp::Normalize { case_change, case_sensitive, stopwords };
    one(ctx.add("", LayerKind::Text(op), &[x])?)
}

fn concat(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add("", LayerKind::Text(TextOp::Concat), &[a, b])?)
}

fn split(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    // An empty delimiter means "split at whitespace", as an absent one.
    let delimiter = ctx.attrs.opt_string("delimiter")?.filter(|d| !d.is_empty()).map(str::to_string);
    let max_split = match ctx.attrs.opt_int("maxsplit")? {
        None => None,
        Some(n) if n >= 0 => Some(n as usize),
        Some(n) => return Err(ctx.invalid(format!("maxsplit {n} is negative"))),
    };
    let x = ctx.input(0)?;
    ctx.add_layer_outputs("", LayerKind::Text(TextOp::Split { delimiter, max_split }), vec![Some(x)])
}

fn regex_full_match(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let pattern = ctx
        .attrs
        .opt_string("pattern")?
        .ok_or_else(|| ctx.invalid("the attribute `pattern` is required"))?
        .to_string();
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::Text(TextOp::RegexFullMatch { pattern }), &[x])?)
}
