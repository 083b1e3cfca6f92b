//! Layers whose output length depends on their input values, evaluated on the host by every
//! backend (a device backend reads the inputs back once): one implementation, so the
//! backends agree element for element.

use crate::ir::tensor::{HostTensor, TensorData};

/// Whether boxes `a` and `b` overlap by more than `threshold` (intersection over union).
fn suppresses(a: &[f64], b: &[f64], center_point_box: bool, threshold: f64) -> bool {
    // (x_min, x_max, y_min, y_max)
    let extent = |q: &[f64]| {
        if center_point_box {
            (q[0] - q[2] / 2.0, q[0] + q[2] / 2.0, q[1] - q[3] / 2.0, q[1] + q[3] / 2.0)
        } else {
            (q[1].min(q[3]), q[1].max(q[3]), q[0].min(q[2]), q[0].max(q[2]))
        }
    };
    let (a, b) = (extent(a), extent(b));
    let (ix_min, ix_max) = (a.0.max(b.0), a.1.min(b.1));
    let (iy_min, iy_max) = (a.2.max(b.2), a.3.min(b.3));
    if ix_max <= ix_min || iy_max <= iy_min {
        return false;
    }
    let intersection = (ix_max - ix_min) * (iy_max - iy_min);
    let area_a = (a.1 - a.0) * (a.3 - a.2);
    let area_b = (b.1 - b.0) * (b.3 - b.2);
    let union = area_a + area_b - intersection;
    if intersection <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    intersection / union > threshold
}

/// The first element of an optional scalar input.
fn first(t: Option<&HostTensor>) -> Option<f64> {
    t.and_then(|t| t.to_f64_vec().first().copied())
}

/// ONNX NonMaxSuppression: `(selected, 3)` i64 rows of (batch, class, box), per class
/// greedily by descending score (ties: lower box first), as the ONNX reference does.
pub fn non_max_suppression(
    boxes: &HostTensor,
    scores: &HostTensor,
    max_per_class: Option<&HostTensor>,
    iou_threshold: Option<&HostTensor>,
    score_threshold: Option<&HostTensor>,
    center_point_box: bool,
) -> Result<HostTensor, String> {
    let (bs, ss) = (boxes.shape(), scores.shape());
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(format!("NonMaxSuppression scores {ss:?} do not match boxes {bs:?}"));
    }
    let (batches, classes, count) = (ss[0], ss[1], ss[2]);
    let limit = match max_per_class {
        Some(t) => t.to_i64_vec().ok_or("max_output_boxes_per_class must be an integer")?.first().copied().unwrap_or(0),
        None => 0,
    }
    .max(0) as usize;
    let iou = first(iou_threshold).unwrap_or(0.0);
    let min_score = first(score_threshold);
    let (bv, sv) = (boxes.to_f64_vec(), scores.to_f64_vec());
    let mut selected: Vec<i64> = Vec::new();
    for b in 0..batches {
        let batch_boxes = &bv[b * count * 4..][..count * 4];
        for c in 0..classes {
            let class_scores = &sv[(b * classes + c) * count..][..count];
            let mut candidates: Vec<usize> =
                (0..count).filter(|&i| min_score.is_none_or(|m| class_scores[i] > m)).collect();
            // Highest score first; ties keep the lower box index first.
            candidates.sort_by(|&i, &j| class_scores[j].total_cmp(&class_scores[i]).then(i.cmp(&j)));
            let mut kept: Vec<usize> = Vec::new();
            for i in candidates {
                if kept.len() >= limit {
                    break;
                }
                let bx = &batch_boxes[i * 4..][..4];
                if !kept.iter().any(|&k| suppresses(bx, &batch_boxes[k * 4..][..4], center_point_box, iou)) {
                    kept.push(i);
                    selected.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let rows = selected.len() / 3;
    HostTensor::new(vec![rows, 3], TensorData::I64(selected)).map_err(|e| e.to_string())
}
