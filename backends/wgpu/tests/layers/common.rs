//! Running one layer on the wgpu backend and on the cpu backend (the oracle) and
//! comparing the outputs.

use kiln::{Backend, DataType, HostTensor, LayerKind, Network, Shape, TensorData};
use kiln_cpu::CpuBackend;
use kiln_wgpu::WgpuBackend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One input slot of the layer under test.
pub enum In {
    /// A network input.
    Run(HostTensor),
    /// A Constant layer.
    Const(HostTensor),
    Absent,
}

/// The backend, or `None` (with a printed SKIPPED line) where no adapter exists.
pub fn gpu() -> Option<WgpuBackend> {
    let backend = WgpuBackend::new();
    match backend.device() {
        Ok(_) => Some(backend),
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
            None
        }
    }
}

/// A network of one layer fed by `inputs`, and the values of its network inputs.
pub fn one_layer(kind: LayerKind, inputs: Vec<In>) -> (Network, Vec<HostTensor>) {
    let mut net = Network::new("test");
    let mut feeds = Vec::new();
    let mut slots = Vec::new();
    for (i, input) in inputs.into_iter().enumerate() {
        slots.push(match input {
            In::Run(t) => {
                let id = net.add_input(&format!("in{i}"), t.dtype(), Shape::fixed(t.shape())).expect("input");
                feeds.push(t);
                Some(id)
            }
            In::Const(t) => {
                let w = net.add_weights(t);
                let layer =
                    net.add_layer(&format!("const{i}"), LayerKind::Constant { weights: w }, vec![]).expect("constant");
                Some(net.output(layer, 0))
            }
            In::Absent => None,
        });
    }
    let layer = net.add_layer("layer", kind, slots).expect("layer");
    for t in net.layer(layer).outputs.clone() {
        net.mark_output(t).expect("output");
    }
    (net, feeds)
}

/// Runs `net` on both backends. wgpu runs it twice: the first execution allocates as it
/// goes, the second takes its memory from the arena planned from the first (see
/// kiln_wgpu's arena); both must give the same values.
pub fn both(gpu: &WgpuBackend, net: &Network, feeds: &[HostTensor]) -> (Vec<HostTensor>, Vec<HostTensor>) {
    let want = CpuBackend::new().prepare(net).expect("cpu prepare").execute(feeds).expect("cpu run");
    let exe = gpu.prepare(net).expect("wgpu prepare");
    let first = exe.execute(feeds).unwrap_or_else(|e| panic!("wgpu run: {e}"));
    let got = exe.execute(feeds).unwrap_or_else(|e| panic!("wgpu run from the arena: {e}"));
    assert_eq!(first.len(), got.len(), "output count of the second run");
    for (a, b) in first.iter().zip(&got) {
        assert!(same_values(a, b), "the run from the arena differs");
    }
    (got, want)
}

/// The same type, shape and values, NaNs equal to NaNs. (`TensorData`'s Debug text is only
/// its type and length, so it cannot tell two tensors apart.)
pub fn same_values(a: &HostTensor, b: &HostTensor) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    if !a.dtype().is_float() {
        return a.data() == b.data();
    }
    a.to_f64_vec().iter().zip(b.to_f64_vec()).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Asserts `got` matches `want`: same type and shape, floats within `rtol` relative plus
/// `atol` absolute, everything else exactly.
pub fn assert_close(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    if want.dtype().is_float() {
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
            assert!(ok, "{what}: element {i}: wgpu {a} vs cpu {b} (shape {:?})", want.shape());
        }
    } else {
        assert_eq!(got.data(), want.data(), "{what}: values");
    }
}

/// Runs one layer on both backends and compares every output at the fp32 tier.
pub fn check(gpu: &WgpuBackend, kind: LayerKind, inputs: Vec<In>, what: &str) {
    check_tol(gpu, kind, inputs, 1e-5, 1e-5, what);
}

pub fn check_tol(gpu: &WgpuBackend, kind: LayerKind, inputs: Vec<In>, rtol: f64, atol: f64, what: &str) {
    let (net, feeds) = one_layer(kind, inputs);
    let (got, want) = both(gpu, &net, &feeds);
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (g, w) in got.iter().zip(&want) {
        assert_close(g, w, rtol, atol, what);
    }
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Uniform f32 values in `[lo, hi)`.
pub fn rand_f32(rng: &mut ChaCha8Rng, shape: &[usize], lo: f32, hi: f32) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::from_f32(shape.to_vec(), (0..n).map(|_| rng.gen_range(lo..hi)).collect()).expect("shape")
}

pub fn rand_i32(rng: &mut ChaCha8Rng, shape: &[usize], lo: i32, hi: i32) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::new(shape.to_vec(), TensorData::I32((0..n).map(|_| rng.gen_range(lo..hi)).collect())).expect("shape")
}

pub fn rand_bool(rng: &mut ChaCha8Rng, shape: &[usize]) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::new(shape.to_vec(), TensorData::Bool((0..n).map(|_| rng.gen_bool(0.5)).collect())).expect("shape")
}

pub fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_i64(shape.to_vec(), v.to_vec()).expect("shape")
}

/// `t` converted to `dtype` on the host (through the cpu backend's Cast).
pub fn cast(t: &HostTensor, dtype: DataType) -> HostTensor {
    let (net, feeds) = one_layer(LayerKind::Cast { to: dtype }, vec![In::Run(t.clone())]);
    CpuBackend::new().prepare(&net).expect("prepare").execute(&feeds).expect("cast").remove(0)
}
