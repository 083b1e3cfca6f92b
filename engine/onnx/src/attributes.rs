//! Typed access to a node's attributes, checking each attribute's declared type.

use crate::error::ImportError;
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, TensorProto};

/// A node's attributes; errors name the node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attributes<'a> {
    pub node: &'a str,
    pub list: &'a [AttributeProto],
}

impl<'a> Attributes<'a> {
    fn invalid(&self, reason: String) -> ImportError {
        ImportError::InvalidModel { node: self.node.to_string(), reason }
    }

    pub fn has(&self, name: &str) -> bool {
        self.list.iter().any(|a| a.name() == name)
    }

    /// The attribute `name` if present, after checking that it holds `expected`.
    fn typed(&self, name: &str, expected: AttributeType) -> Result<Option<&'a AttributeProto>, ImportError> {
        let Some(attr) = self.list.iter().find(|a| a.name() == name) else {
            return Ok(None);
        };
        if attr.ref_attr_name.is_some() {
            return Err(self
                .invalid(format!("attribute `{name}` refers to a function attribute, which only functions may use")));
        }
        let declared = AttributeType::try_from(attr.r#type.unwrap_or(0)).unwrap_or(AttributeType::Undefined);
        // IR version 1 had no type field: accept the attribute when the expected field is set.
        let matches = match declared {
            AttributeType::Undefined => match expected {
                AttributeType::Int => attr.i.is_some(),
                AttributeType::Float => attr.f.is_some(),
                AttributeType::String => attr.s.is_some(),
                AttributeType::Tensor => attr.t.is_some(),
                _ => true,
            },
            declared => declared == expected,
        };
        if !matches {
            return Err(self.invalid(format!(
                "attribute `{name}` must be {}, got {}",
                expected.as_str_name(),
                declared.as_str_name()
            )));
        }
        Ok(Some(attr))
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, ImportError> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, ImportError> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    /// A 0/1 flag; other values are rejected.
    pub fn flag(&self, name: &str, default: bool) -> Result<bool, ImportError> {
        match self.int(name, default as i64)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.invalid(format!("attribute `{name}` must be 0 or 1, got {other}"))),
        }
    }

    /// An integer attribute that must be present.
    pub fn required_int(&self, name: &str) -> Result<i64, ImportError> {
        self.opt_int(name)?.ok_or_else(|| self.invalid(format!("attribute `{name}` is required")))
    }

    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, ImportError> {
        Ok(self.typed(name, AttributeType::Float)?.map(|a| a.f()))
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, ImportError> {
        Ok(self.opt_float(name)?.unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> Result<Option<&'a [i64]>, ImportError> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.as_slice()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<&'a [f32]>, ImportError> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.as_slice()))
    }

    pub fn opt_string(&self, name: &str) -> Result<Option<&'a str>, ImportError> {
        match self.typed(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => std::str::from_utf8(a.s())
                .map(Some)
                .map_err(|_| self.invalid(format!("attribute `{name}` is not valid UTF-8"))),
        }
    }

    /// A list-of-strings attribute, each entry UTF-8.
    pub fn strings(&self, name: &str) -> Result<Option<Vec<&'a str>>, ImportError> {
        let Some(attr) = self.typed(name, AttributeType::Strings)? else {
            return Ok(None);
        };
        attr.strings
            .iter()
            .map(|s| {
                std::str::from_utf8(s).map_err(|_| self.invalid(format!("attribute `{name}` holds a string that is not UTF-8")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub fn string(&self, name: &str, default: &'a str) -> Result<&'a str, ImportError> {
        Ok(self.opt_string(name)?.unwrap_or(default))
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&'a TensorProto>, ImportError> {
        Ok(self.typed(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
    }

    /// A graph attribute (a Loop body, an If branch), which must be present.
    pub fn graph(&self, name: &str) -> Result<&'a GraphProto, ImportError> {
        self.typed(name, AttributeType::Graph)?
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| self.invalid(format!("the graph attribute `{name}` is required")))
    }
}
