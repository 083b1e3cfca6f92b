//! A readable text dump of a network, one line per tensor and layer.

use super::layer::LayerKind;
use super::network::Network;
use std::fmt::Write;

impl Network {
    /// A stable, line-oriented text form for humans, tests and golden files.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "network `{}`: {} inputs, {} outputs, {} layers, {} weights blobs",
            self.name,
            self.inputs().len(),
            self.outputs().len(),
            self.layers().len(),
            self.weights().len()
        );
        for &t in self.inputs() {
            let d = self.tensor(t);
            let _ = writeln!(s, "input  `{}`: {}{} {}", d.name, d.dtype, d.shape, d.format.name());
        }
        for (i, l) in self.layers().iter().enumerate() {
            let ins: Vec<String> = l
                .inputs
                .iter()
                .map(|t| t.map_or("-".to_string(), |t| format!("`{}`", self.tensor(t).name)))
                .collect();
            let outs: Vec<String> = l
                .outputs
                .iter()
                .map(|&t| {
                    let d = self.tensor(t);
                    format!("`{}`: {}{}", d.name, d.dtype, d.shape)
                })
                .collect();
            let params = match &l.kind {
                LayerKind::Constant { weights } => format!("weights #{}", weights.0),
                other => format!("{other:?}"),
            };
            let _ = writeln!(
                s,
                "[{i}] `{}` {} {{{}}} ({}) -> {}",
                l.name,
                l.kind.type_name(),
                params,
                ins.join(", "),
                outs.join(", ")
            );
        }
        for &t in self.outputs() {
            let d = self.tensor(t);
            let _ = writeln!(s, "output `{}`: {}{} {}", d.name, d.dtype, d.shape, d.format.name());
        }
        s
    }
}
