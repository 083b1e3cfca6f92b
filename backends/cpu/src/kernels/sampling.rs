//! GridSample and BitCast, following the ONNX reference implementation.

use crate::element::{float_data, pack, FloatElem};
use crate::layout::volume;
use kiln::{DataType, GridSampleMode, GridSamplePadding, GridSampleParams, HostTensor, TensorData};

/// One axis of the sampled input: its length and the coordinate range that maps onto it.
struct SampledAxis {
    len: usize,
    /// The coordinates of the grid's -1 and 1 (cell centers or outer edges).
    min: f64,
    max: f64,
}

impl SampledAxis {
    fn new(len: usize, align_corners: bool) -> SampledAxis {
        let len_f = len as f64;
        if align_corners {
            SampledAxis { len, min: 0.0, max: len_f - 1.0 }
        } else {
            SampledAxis { len, min: -0.5, max: len_f - 0.5 }
        }
    }

    /// Folds `x` into `[min, max]` by mirroring at the borders.
    fn reflect(&self, x: f64) -> f64 {
        let range = self.max - self.min;
        if range <= 0.0 || !x.is_finite() {
            return self.min.max(0.0);
        }
        let fold = |dx: f64, near: f64, far: f64, toward_far: f64| {
            let n = (dx / range).trunc();
            let r = dx - n * range;
            if n % 2.0 == 0.0 {
                near + toward_far * r
            } else {
                far - toward_far * r
            }
        };
        if x < self.min {
            fold(self.min - x, self.min, self.max, 1.0)
        } else if x > self.max {
            fold(x - self.max, self.max, self.min, -1.0)
        } else {
            x
        }
    }

    /// The cell a tap at integer position `i` reads; `None` reads zero.
    fn cell(&self, i: i64, padding: GridSamplePadding) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let last = self.len as i64 - 1;
        match padding {
            GridSamplePadding::Zeros => (0..=last).contains(&i).then_some(i as usize),
            GridSamplePadding::Border => Some(i.clamp(0, last) as usize),
            GridSamplePadding::Reflection => Some((self.reflect(i as f64) as i64).clamp(0, last) as usize),
        }
    }

    /// The taps (cell, weight) for normalized coordinate `g`.
    fn taps(&self, g: f64, p: &GridSampleParams) -> Vec<(Option<usize>, f64)> {
        let len_f = self.len as f64;
        let mut x = if p.align_corners { (g + 1.0) / 2.0 * (len_f - 1.0) } else { ((g + 1.0) * len_f - 1.0) / 2.0 };
        if p.mode == GridSampleMode::Nearest {
            x = x.round_ties_even();
        }
        if x < self.min || x > self.max {
            match p.padding {
                GridSamplePadding::Zeros => {}
                GridSamplePadding::Border => x = x.clamp(0.0, (len_f - 1.0).max(0.0)),
                GridSamplePadding::Reflection => x = self.reflect(x),
            }
        }
        // Saturating float→int casts keep hostile coordinates (inf, NaN) from overflowing.
        let base = x.floor() as i64;
        let t = x - x.floor();
        let at = |k: i64| self.cell(base.saturating_add(k), p.padding);
        match p.mode {
            GridSampleMode::Nearest => vec![(self.cell(x as i64, p.padding), 1.0)],
            GridSampleMode::Linear => vec![(at(0), 1.0 - t), (at(1), t)],
            GridSampleMode::Cubic => {
                let w = cubic_weights(t);
                vec![(at(-1), w[0]), (at(0), w[1]), (at(1), w[2]), (at(2), w[3])]
            }
        }
    }
}

/// Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 from `t`.
fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let near = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

pub fn grid_sample(
    p: &GridSampleParams,
    x: &HostTensor,
    grid: &HostTensor,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let (xs, gs) = (x.shape(), grid.shape());
    let rank = xs.len();
    if rank < 3 || gs.len() != rank || gs[0] != xs[0] || gs[rank - 1] != rank - 2 {
        return Err(format!("GridSample grid {gs:?} does not fit input {xs:?}"));
    }
    let axes: Vec<SampledAxis> = xs[2..].iter().map(|&len| SampledAxis::new(len, p.align_corners)).collect();
    let cells = volume(&xs[2..]);
    let points = volume(&gs[1..rank - 1]);
    let (batch, channels, spatial) = (xs[0], xs[1], rank - 2);
    let (xv, gv) = (x.to_f64_vec(), grid.to_f64_vec());
    let mut out = vec![0f64; volume(out_shape)];
    for b in 0..batch {
        for pt in 0..points {
            let coords = &gv[(b * points + pt) * spatial..][..spatial];
            // (offset within one channel, weight) of every tap combination that reads a cell.
            let mut taps: Vec<(usize, f64)> = vec![(0, 1.0)];
            for (a, axis) in axes.iter().enumerate() {
                let stride = volume(&xs[3 + a..]);
                // The grid lists the innermost axis first.
                let axis_taps = axis.taps(coords[spatial - 1 - a], p);
                taps = taps
                    .iter()
                    .flat_map(|&(off, w)| {
                        axis_taps.iter().filter_map(move |&(cell, wa)| cell.map(|c| (off + c * stride, w * wa)))
                    })
                    .collect();
            }
            for c in 0..channels {
                let plane = &xv[(b * channels + c) * cells..][..cells];
                out[(b * channels + c) * points + pt] = taps.iter().map(|&(off, w)| plane[off] * w).sum();
            }
        }
    }
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    float_data!(x.data(), "GridSample", v => to_float(v, out))
}

/// The bits of every element read as `to`.
pub fn bit_cast(x: &HostTensor, to: DataType) -> Result<TensorData, String> {
    if x.dtype().size_bytes() != to.size_bytes() {
        return Err(format!("BitCast from {} to {} changes the element width", x.dtype(), to));
    }
    TensorData::from_le_bytes(to, &x.data().to_le_bytes())
        .ok_or_else(|| format!("BitCast to {to}: a byte is neither 0 nor 1"))
}

