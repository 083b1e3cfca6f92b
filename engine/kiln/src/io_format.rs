//! I/O formats (seed §6.6): the builder pass that picks each network input's and output's
//! memory layout from its allowed formats and inserts Reformat layers at the boundary.
//!
//! A format is eligible when the tensor's allowed-formats mask holds it and the seed's
//! table allows the tensor's type in it ([`TensorFormat::allows`]). Among eligible formats
//! the pass prefers one the backend consumes directly, then LINEAR, then the first in
//! TensorRT's enum order. A non-LINEAR choice turns the boundary tensor into its physical
//! layout (see [`crate::ir::format`]) joined to the LINEAR inside of the network by a
//! Reformat layer. With DIRECT_IO every boundary format must be one the backend consumes
//! directly (its Reformat is then folded into the adjacent kernel), or the build fails.

use crate::backend::Backend;
use crate::error::NetworkError;
use crate::ir::format::{FormatError, TensorFormat};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorDesc, TensorId};
use crate::ir::rewrite::Rewriter;
use std::collections::HashMap;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IoFormatError {
    /// No allowed format admits the tensor's type.
    #[error("{role} `{tensor}` is {dtype}, which none of its allowed formats ({allowed}) supports; {table}")]
    NoFormatForType { role: &'static str, tensor: String, dtype: String, allowed: String, table: String },
    /// DIRECT_IO and no allowed format the backend consumes without a reformat.
    #[error("DIRECT_IO: {role} `{tensor}` ({dtype}) allows {allowed}, but backend `{backend}` consumes none of them without a reformat")]
    DirectIo { role: &'static str, tensor: String, dtype: String, allowed: String, backend: String },
    /// The tensor's shape does not fit the chosen layout.
    #[error("{role} `{tensor}` cannot take format {format}: {reason}")]
    Shape { role: &'static str, tensor: String, format: &'static str, reason: FormatError },
    #[error(transparent)]
    Network(#[from] NetworkError),
}

/// Chooses boundary formats and inserts Reformat layers; a network whose inputs and
/// outputs are all LINEAR comes back unchanged.
pub fn apply(network: &Network, backend: &dyn Backend, direct_io: bool) -> Result<Network, IoFormatError> {
    let mut input_formats = Vec::with_capacity(network.inputs().len());
    for &t in network.inputs() {
        input_formats.push(choose(network.tensor(t), "input", backend, direct_io)?);
    }
    let mut output_formats = Vec::with_capacity(network.outputs().len());
    for &t in network.outputs() {
        output_formats.push(choose(network.tensor(t), "output", backend, direct_io)?);
    }
    if input_formats.iter().chain(&output_formats).all(|&f| f == TensorFormat::Linear) {
        return Ok(network.clone());
    }
    let mut rw = Rewriter::new(network);
    for (&src, &format) in network.inputs().iter().zip(&input_formats) {
        if format == TensorFormat::Linear {
            continue;
        }
        let desc = network.tensor(src).clone();
        let (physical, channels) = physical(&desc, format, "input")?;
        let boundary = rw.mapped(src).expect("inputs are copied");
        let d = rw.tensor_mut(boundary);
        d.shape = physical;
        d.format = format;
        let inside = rw.add_layer(
            &format!("Reformatting input `{}` from {}", desc.name, format.name()),
            LayerKind::Reformat { from: format, to: TensorFormat::Linear, channels },
            vec![Some(boundary)],
            &[format!("{} (linear)", desc.name)],
        )?[0];
        rw.set_mapped(src, inside);
    }
    for i in 0..network.layers().len() {
        let outs = rw.copy_layer(LayerId(i), &HashMap::new())?;
        for (&src, out) in network.layers()[i].outputs.iter().zip(outs) {
            rw.set_mapped(src, out);
        }
    }
    let mut outputs: Vec<TensorId> = Vec::with_capacity(network.outputs().len());
    for (&src, &format) in network.outputs().iter().zip(&output_formats) {
        let inside = rw.mapped(src).expect("outputs are produced");
        if format == TensorFormat::Linear {
            outputs.push(inside);
            continue;
        }
        let desc = network.tensor(src).clone();
        let (_, channels) = physical(&desc, format, "output")?;
        rw.rename(inside, &format!("{} (linear)", desc.name))?;
        let boundary = rw.add_layer(
            &format!("Reformatting output `{}` to {}", desc.name, format.name()),
            LayerKind::Reformat { from: TensorFormat::Linear, to: format, channels },
            vec![Some(inside)],
            std::slice::from_ref(&desc.name),
        )?[0];
        let d = rw.tensor_mut(boundary);
        d.format = format;
        d.allowed_formats = desc.allowed_formats;
        d.requested_type = desc.requested_type;
        rw.tensor_mut(inside).allowed_formats = Default::default();
        outputs.push(boundary);
    }
    Ok(rw.finish(outputs)?)
}

fn choose(desc: &TensorDesc, role: &'static str, backend: &dyn Backend, direct_io: bool) -> Result<TensorFormat, IoFormatError> {
    let allowed = desc.allowed_formats;
    let eligible: Vec<TensorFormat> = allowed.formats().into_iter().filter(|f| f.allows(desc.dtype)).collect();
    if eligible.is_empty() {
        let table: Vec<String> = allowed
            .formats()
            .into_iter()
            .map(|f| {
                let types: Vec<&str> = f.allowed_types().into_iter().map(|t| t.name()).collect();
                format!("{} takes {}", f.name(), types.join("|"))
            })
            .collect();
        return Err(IoFormatError::NoFormatForType {
            role,
            tensor: desc.name.clone(),
            dtype: desc.dtype.to_string(),
            allowed: allowed.names(),
            table: table.join(", "),
        });
    }
    let direct = eligible.iter().copied().find(|&f| backend.consumes_io_format(f, desc.dtype));
    match direct {
        Some(f) => Ok(f),
        None if direct_io => Err(IoFormatError::DirectIo {
            role,
            tensor: desc.name.clone(),
            dtype: desc.dtype.to_string(),
            allowed: allowed.names(),
            backend: backend.name().to_string(),
        }),
        None if eligible.contains(&TensorFormat::Linear) => Ok(TensorFormat::Linear),
        None => Ok(eligible[0]),
    }
}

/// The physical shape of a boundary tensor in `format`, and its channel count.
fn physical(desc: &TensorDesc, format: TensorFormat, role: &'static str) -> Result<(crate::Shape, usize), IoFormatError> {
    let err = |reason| IoFormatError::Shape { role, tensor: desc.name.clone(), format: format.name(), reason };
    let shape = format.physical_shape(&desc.shape).map_err(err)?;
    let c_axis = desc.shape.rank() - format.spatial_rank() - 1;
    let channels = desc.shape.dims()[c_axis].fixed().expect("physical_shape checked the channel dim");
    Ok((shape, channels))
}
