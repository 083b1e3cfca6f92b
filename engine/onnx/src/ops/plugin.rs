//! Nodes of a custom domain: a registered plugin whose namespace is the node's domain
//! and whose name is its op type becomes a Plugin layer; the node's attributes become
//! the plugin's fields (typed as the creator declares them).

use crate::context::NodeContext;
use crate::error::ImportError;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::AttributeProto;
use kiln::plugin::{FieldSpec, FieldType, PluginCreator};
use kiln::{LayerKind, PluginField, PluginParams, TensorId};
use std::sync::Arc;

pub(crate) fn build(ctx: &mut NodeContext<'_>, creator: &Arc<dyn PluginCreator>) -> Result<Vec<TensorId>, ImportError> {
    let key = creator.key();
    let specs = creator.field_specs();
    let fields = ctx
        .attrs
        .list
        .iter()
        .map(|a| field(a, &specs).map_err(|r| ctx.invalid(format!("plugin `{key}`: {r}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let plugin = creator.create(&fields).map_err(|e| ctx.invalid(e.to_string()))?;
    let inputs = (0..ctx.inputs.len()).map(|i| ctx.input(i).map(Some)).collect::<Result<Vec<_>, _>>()?;
    ctx.add_layer_outputs("", LayerKind::Plugin(PluginParams::new(plugin)), inputs)
}

/// An attribute as a field, converted to the type the creator declares for its name.
fn field(attr: &AttributeProto, specs: &[FieldSpec]) -> Result<(String, PluginField), String> {
    let name = attr.name().to_string();
    let declared = specs.iter().find(|s| s.name == name).map(|s| s.ty);
    let kind = AttributeType::try_from(attr.r#type.unwrap_or(0)).unwrap_or(AttributeType::Undefined);
    let (floats, ints): (Vec<f64>, Vec<i64>) = match kind {
        AttributeType::Float => (vec![attr.f() as f64], vec![]),
        AttributeType::Floats => (attr.floats.iter().map(|&f| f as f64).collect(), vec![]),
        AttributeType::Int => (vec![], vec![attr.i()]),
        AttributeType::Ints => (vec![], attr.ints.clone()),
        AttributeType::String => {
            let bytes = attr.s().to_vec();
            return Ok((
                name.clone(),
                match declared {
                    Some(FieldType::Bytes) => PluginField::Bytes(bytes),
                    _ => PluginField::Text(
                        String::from_utf8(bytes).map_err(|_| format!("attribute `{name}` is not UTF-8 text"))?,
                    ),
                },
            ));
        }
        other => return Err(format!("attribute `{name}` is of type {other:?}, which plugin fields cannot hold")),
    };
    let is_float = matches!(kind, AttributeType::Float | AttributeType::Floats);
    let value = match (declared, is_float) {
        (Some(FieldType::F32), _) | (None, true) => PluginField::F32(if is_float {
            floats.iter().map(|&f| f as f32).collect()
        } else {
            ints.iter().map(|&i| i as f32).collect()
        }),
        (Some(FieldType::F64), _) => {
            PluginField::F64(if is_float { floats } else { ints.iter().map(|&i| i as f64).collect() })
        }
        (Some(FieldType::I32), false) => PluginField::I32(
            ints.iter()
                .map(|&i| i32::try_from(i).map_err(|_| format!("attribute `{name}` value {i} does not fit i32")))
                .collect::<Result<_, _>>()?,
        ),
        (Some(FieldType::I64), false) | (None, false) => PluginField::I64(ints),
        (Some(t), _) => return Err(format!("attribute `{name}` is {kind:?}, the plugin declares {t:?}")),
    };
    Ok((name, value))
}
