//! What a model declares about its graph outputs, against what kiln computes. A declared
//! element type that differs is an error (the caller would read the wrong type, and ONNX
//! Runtime refuses such a model too); a declared shape that differs is a warning, as
//! exporters sometimes write stale shapes, and kiln's inferred shape is what runs.

use crate::error::ImportError;
use crate::proto::tensor_shape_proto::dimension::Value as DimValue;
use crate::proto::type_proto::Value as TypeValue;
use crate::proto::GraphProto;
use crate::tensor::dtype_from_onnx;
use kiln::{Dim, Network};

/// Checks every graph output's declared type; returns the warnings about shapes.
pub(crate) fn check_outputs(graph: &GraphProto, net: &Network) -> Result<Vec<String>, ImportError> {
    let mut warnings = Vec::new();
    for output in &graph.output {
        let name = output.name();
        let Some(t) = net.find_tensor(name) else { continue };
        let Some(TypeValue::TensorType(declared)) = output.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
            continue;
        };
        let computed = net.tensor(t);
        // 0 is UNDEFINED: the model declares no element type.
        if declared.elem_type() != 0 {
            let dtype = dtype_from_onnx(declared.elem_type())
                .map_err(|reason| ImportError::graph(format!("graph output `{name}`: {reason}")))?;
            if dtype != computed.dtype {
                return Err(ImportError::graph(format!(
                    "graph output `{name}` is declared {dtype} but the graph computes {}",
                    computed.dtype
                )));
            }
        }
        let Some(shape) = &declared.shape else { continue };
        let dims: Vec<Option<i64>> = shape
            .dim
            .iter()
            .map(|d| match d.value {
                Some(DimValue::DimValue(v)) => Some(v),
                _ => None,
            })
            .collect();
        let inferred = computed.shape.dims();
        let disagrees = dims.len() != inferred.len()
            || dims.iter().zip(inferred).any(|(d, i)| match (d, i) {
                (Some(d), Dim::Fixed(i)) => usize::try_from(*d).ok() != Some(*i),
                _ => false,
            });
        if disagrees {
            let text: Vec<String> = dims.iter().map(|d| d.map_or("?".to_string(), |d| d.to_string())).collect();
            warnings.push(format!(
                "graph output `{name}` is declared [{}] but kiln infers {}; the inferred shape is used",
                text.join(","),
                computed.shape
            ));
        }
    }
    Ok(warnings)
}
