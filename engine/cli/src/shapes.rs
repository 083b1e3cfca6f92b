//! Shape options (trtexec style): `--shapes name:1x3x224x224[,name2:…]` for the inputs
//! of `kiln run`, `--min-shapes / --opt-shapes / --max-shapes` for the profile of
//! `kiln build`.

use anyhow::{bail, Context};
use kiln::{Dim, HostTensor, Network, OptimizationProfile};
use std::collections::{BTreeMap, HashMap};

/// Input name → dims, in the order given.
pub type ShapeList = BTreeMap<String, Vec<usize>>;

/// Parses `name:AxBxC[,name2:…]`; a name may itself contain `:` (the last one splits).
/// `name:` (no dims) is a 0-D input.
pub fn parse(option: &str, text: &str) -> anyhow::Result<ShapeList> {
    let mut out = ShapeList::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let Some((name, dims)) = item.rsplit_once(':') else {
            bail!("{option}: `{item}` is not `name:dims` (e.g. `input:1x3x224x224`)");
        };
        if name.is_empty() {
            bail!("{option}: `{item}` has no input name before `:`");
        }
        let dims = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split('x').map(|d| d.parse::<usize>()).collect::<Result<Vec<usize>, _>>().with_context(|| {
                format!("{option}: the dims of `{name}` must be numbers joined by `x`, not `{dims}`")
            })?
        };
        if out.insert(name.to_string(), dims).is_some() {
            bail!("{option}: input `{name}` is given twice");
        }
    }
    Ok(out)
}

fn input_names(network: &Network) -> String {
    network.inputs().iter().map(|&t| network.tensor(t).name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Every name must be a network input, with the input's rank and fixed dims.
pub fn check_against_network(option: &str, shapes: &ShapeList, network: &Network) -> anyhow::Result<()> {
    for (name, dims) in shapes {
        let Some(desc) = network.inputs().iter().map(|&t| network.tensor(t)).find(|d| &d.name == name) else {
            bail!("{option}: `{name}` is not an input of the model (inputs: {})", input_names(network));
        };
        if dims.len() != desc.shape.rank() {
            bail!(
                "{option}: input `{name}` has rank {} ({}) but {} dims were given",
                desc.shape.rank(),
                desc.shape,
                dims.len()
            );
        }
        for (axis, (d, &n)) in desc.shape.dims().iter().zip(dims).enumerate() {
            if let Dim::Fixed(f) = d {
                if *f != n {
                    bail!("{option}: input `{name}` axis {axis} is fixed at {f} ({}) but {n} was given", desc.shape);
                }
            }
        }
    }
    Ok(())
}

pub fn text(dims: &[usize]) -> String {
    dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

/// For a network with dynamic inputs, the profile that fixes them at the given inputs'
/// shapes (min = opt = max); `None` when every input is fixed.
pub fn exact_profile(network: &Network, inputs: &HashMap<String, HostTensor>) -> Option<OptimizationProfile> {
    let mut profile = OptimizationProfile::new();
    let mut any = false;
    for &t in network.inputs() {
        let desc = network.tensor(t);
        if desc.shape.dims().iter().all(Dim::is_fixed) {
            continue;
        }
        let dims = inputs.get(&desc.name)?.shape();
        profile.set_dimensions(&desc.name, dims, dims, dims);
        any = true;
    }
    any.then_some(profile)
}

/// The build profile from `--min-shapes`, `--opt-shapes`, `--max-shapes`: min and max
/// name the same inputs; opt defaults to max. `None` when none is given.
pub fn build_profile(
    network: &Network,
    min: Option<&str>,
    opt: Option<&str>,
    max: Option<&str>,
) -> anyhow::Result<Option<OptimizationProfile>> {
    let (min, max) = match (min, max) {
        (None, None) if opt.is_none() => return Ok(None),
        (Some(min), Some(max)) => (parse("--min-shapes", min)?, parse("--max-shapes", max)?),
        _ => bail!("--min-shapes and --max-shapes go together (--opt-shapes is optional and defaults to the max)"),
    };
    let opt = match opt {
        Some(opt) => parse("--opt-shapes", opt)?,
        None => max.clone(),
    };
    for (option, list) in [("--min-shapes", &min), ("--opt-shapes", &opt), ("--max-shapes", &max)] {
        check_against_network(option, list, network)?;
    }
    if min.keys().ne(max.keys()) || opt.keys().ne(max.keys()) {
        bail!(
            "--min-shapes, --opt-shapes and --max-shapes must name the same inputs (min: {}; opt: {}; max: {})",
            min.keys().cloned().collect::<Vec<_>>().join(", "),
            opt.keys().cloned().collect::<Vec<_>>().join(", "),
            max.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut profile = OptimizationProfile::new();
    for (name, max_dims) in &max {
        profile.set_dimensions(name, &min[name], &opt[name], max_dims);
    }
    Ok(Some(profile))
}
