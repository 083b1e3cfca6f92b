//! The network inputs of `kiln run`, `compare` and `bench`: read from an `.npz` archive,
//! from one file per input (`.npy`, or raw bytes), or generated at random.

use crate::{npz, random_inputs, shapes};
use anyhow::{bail, Context};
use kiln::{DataType, Dim, HostTensor, Network, OptimizationProfile, TensorDesc};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The input options every command that runs a model takes.
#[derive(Debug, clap::Args)]
pub struct InputOptions {
    /// An `.npz` file with one array per network input, keyed by input name (arrays that
    /// name no input are ignored, with a warning); for a one-input model also a single
    /// `.npy` file. Without input files the inputs are random (see --seed, --input-range).
    #[arg(long, value_name = "IN.npz")]
    pub inputs: Option<PathBuf>,
    /// One file per input, `name:x.npy,name2:y.bin` (trtexec's --loadInputs): a `.npy`
    /// array, or any other file as raw bytes of the input's type in C order, its dims fixed
    /// by the model or given with --shapes. With --inputs, these win for the inputs they name.
    #[arg(long, value_name = "NAME:FILE,…", value_parser = parse_load_inputs)]
    pub load_inputs: Option<LoadInputs>,
    /// Dims of dynamic inputs, `name:1x3x224x224[,name2:…]`: used for random and raw inputs
    /// and checked against the arrays read; dynamic dims given nowhere are 1, with a warning.
    #[arg(long, value_name = "SHAPES")]
    pub shapes: Option<String>,
    /// Seed of the random inputs (ChaCha8).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Random values uniform in [LO, HI) (integers: the whole numbers in it, clamped to the
    /// type). Default: floats in [-1, 1), integers in [0, 10); bools are fair coins.
    #[arg(long, value_name = "LO,HI", value_parser = parse_range, allow_hyphen_values = true)]
    pub input_range: Option<InputRange>,
}

/// `--load-inputs`: (input name, file) pairs in the order given.
#[derive(Clone, Debug)]
pub struct LoadInputs(pub Vec<(String, PathBuf)>);

/// `--input-range LO,HI`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputRange {
    pub lo: f64,
    pub hi: f64,
}

fn parse_load_inputs(text: &str) -> Result<LoadInputs, String> {
    let mut pairs = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        // A name may contain `:`; a file name rarely does: the first `:` splits.
        let Some((name, file)) = item.split_once(':').filter(|(n, f)| !n.is_empty() && !f.is_empty()) else {
            return Err(format!("`{item}` is not NAME:FILE"));
        };
        if pairs.iter().any(|(n, _)| n == name) {
            return Err(format!("it names input `{name}` twice"));
        }
        pairs.push((name.to_string(), PathBuf::from(file)));
    }
    if pairs.is_empty() {
        return Err("no NAME:FILE given".into());
    }
    Ok(LoadInputs(pairs))
}

fn parse_range(text: &str) -> Result<InputRange, String> {
    let parse = |s: &str| s.trim().parse::<f64>().map_err(|e| format!("`{s}` is not a number ({e})"));
    let Some((lo, hi)) = text.split_once(',') else { return Err(format!("`{text}` is not LO,HI")) };
    let (lo, hi) = (parse(lo)?, parse(hi)?);
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Err(format!("LO must be below HI, both finite; got {lo},{hi}"));
    }
    Ok(InputRange { lo, hi })
}

impl InputOptions {
    /// The files the options read, for the check that no output overwrites them.
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        let listed = self.load_inputs.iter().flat_map(|l| l.0.iter().map(|(_, p)| ("--load-inputs", p.as_path())));
        self.inputs.iter().map(|p| ("--inputs", p.as_path())).chain(listed)
    }
}

/// The run's inputs and where they came from. Dynamic dims of random inputs come from
/// `--shapes`, else from `profile`'s opt dims (an engine's first profile), else 1.
pub fn make(
    options: &InputOptions,
    network: &Network,
    profile: Option<&OptimizationProfile>,
) -> anyhow::Result<(HashMap<String, HostTensor>, String)> {
    let given = match &options.shapes {
        Some(text) => shapes::parse("--shapes", text)?,
        None => shapes::ShapeList::new(),
    };
    shapes::check_against_network("--shapes", &given, network)?;
    if options.inputs.is_none() && options.load_inputs.is_none() {
        let mut dims = given;
        for (name, range) in profile.into_iter().flat_map(|p| p.dimension_ranges()) {
            dims.entry(name.to_string()).or_insert_with(|| range.opt.clone());
        }
        let inputs = random_inputs::random(network, &dims, options.seed, options.input_range)?;
        let range = match options.input_range {
            Some(r) => format!(", values in [{}, {})", r.lo, r.hi),
            None => String::new(),
        };
        return Ok((inputs, format!("random, ChaCha8 seed {}{range}", options.seed)));
    }
    let mut arrays: HashMap<String, (HostTensor, String)> = HashMap::new();
    let mut sources = Vec::new();
    if let Some(path) = &options.inputs {
        for (name, array) in read_inputs_file(network, path)? {
            arrays.insert(name, (array, format!("`{}`", path.display())));
        }
        sources.push(format!("from `{}`", path.display()));
    }
    if let Some(LoadInputs(list)) = &options.load_inputs {
        for (name, path) in list {
            let desc = input_desc(network, name).with_context(|| format!("--load-inputs `{name}:{}`", path.display()))?;
            let array = read_one_input(desc, path, given.get(name))
                .with_context(|| format!("cannot read input `{name}` from `{}`", path.display()))?;
            arrays.insert(name.clone(), (array, format!("`{}`", path.display())));
        }
        sources.push("--load-inputs".to_string());
    }
    let mut inputs = HashMap::with_capacity(arrays.len());
    for &t in network.inputs() {
        let desc = network.tensor(t);
        let Some((array, file)) = arrays.remove(&desc.name) else {
            let mut held: Vec<String> = arrays.keys().map(|n| format!("`{n}`")).collect();
            held.sort();
            let held = if held.is_empty() { String::new() } else { format!("; they also hold {}", held.join(", ")) };
            bail!(
                "input `{}` is given by no input file ({}): every input needs an array named `{}`{held}",
                desc.name,
                sources.join(", "),
                desc.name
            );
        };
        if let Some(dims) = given.get(&desc.name).filter(|d| d.as_slice() != array.shape()) {
            bail!("--shapes gives input `{}` dims {} but {file} holds {}", desc.name, shapes::text(dims), shapes::text(array.shape()));
        }
        inputs.insert(desc.name.clone(), as_input_type(desc, array)?);
    }
    if !arrays.is_empty() {
        let mut stray: Vec<String> = arrays.into_iter().map(|(name, (_, file))| format!("`{name}` ({file})")).collect();
        stray.sort();
        tracing::warn!(
            "arrays that are no input of the model, ignored: {} (inputs: {})",
            stray.join(", "),
            input_names(network).join(", ")
        );
    }
    Ok((inputs, sources.join(" and ")))
}

fn input_names(network: &Network) -> Vec<&str> {
    network.inputs().iter().map(|&t| network.tensor(t).name.as_str()).collect()
}

fn input_desc<'n>(network: &'n Network, name: &str) -> anyhow::Result<&'n TensorDesc> {
    match network.inputs().iter().map(|&t| network.tensor(t)).find(|d| d.name == name) {
        Some(desc) => Ok(desc),
        None => bail!("`{name}` is not an input of the model (inputs: {})", input_names(network).join(", ")),
    }
}

/// `--inputs`: the arrays of an `.npz` archive, or a lone `.npy` array for a one-input model.
fn read_inputs_file(network: &Network, path: &Path) -> anyhow::Result<Vec<(String, HostTensor)>> {
    let names = input_names(network);
    if npz::is_npy_file(path) {
        let [only] = names.as_slice() else {
            bail!(
                "`{}` is a single .npy array but the model has {} inputs ({}): give an .npz archive, or --load-inputs NAME:FILE per input",
                path.display(),
                names.len(),
                names.join(", ")
            );
        };
        return Ok(vec![(only.to_string(), npz::read_npy(path)?)]);
    }
    npz::read_npz(path)
}

/// One `--load-inputs` file: an `.npy` array, else raw bytes of the input's type, in its
/// fixed dims or those `--shapes` gives.
fn read_one_input(desc: &TensorDesc, path: &Path, dims: Option<&Vec<usize>>) -> anyhow::Result<HostTensor> {
    if npz::is_npy_file(path) {
        return npz::read_npy(path);
    }
    let shape: Vec<usize> = match dims {
        Some(d) => d.clone(),
        None => desc
            .shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                _ => Err(anyhow::anyhow!(
                    "it is raw data and the input's dims {} are dynamic: give them with --shapes {}:…",
                    desc.shape,
                    desc.name
                )),
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let bytes = std::fs::read(path)?;
    HostTensor::from_le_bytes(desc.dtype, shape, &bytes).map_err(anyhow::Error::msg)
}

/// The array as the input's type: bf16 travels in `.npz` as `<u2` raw bits, narrow types as
/// their storage; anything else must match exactly.
fn as_input_type(desc: &TensorDesc, array: HostTensor) -> anyhow::Result<HostTensor> {
    Ok(match (desc.dtype, array.dtype()) {
        (DataType::BF16, DataType::BF16) => array,
        (DataType::BF16, DataType::U16) => npz::reinterpret_u16_as_bf16(array)?,
        (DataType::BF16, actual) => bail!("input `{}` must be bf16 (stored as <u2 raw bits), got {actual}", desc.name),
        (narrow, actual) if narrow.is_narrow() && actual != narrow => {
            npz::reinterpret_narrow(array, narrow).with_context(|| format!("input `{}`", desc.name))?
        }
        (expected, actual) if expected != actual => bail!("input `{}` must be {expected}, got {actual}", desc.name),
        _ => array,
    })
}
