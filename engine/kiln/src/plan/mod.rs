//! Kernel planning every backend shares: what a kernel computes, worked out on the host
//! from shapes, attributes and small parameter tensors (taps, index maps, parameter
//! indexing), so the cpu oracle and the device backends agree by construction. Depends
//! only on the IR.

pub mod dynamic;
pub mod loops;
pub mod matmul;
pub mod nms;
pub mod norm;
pub mod pad;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod join_line;
pub mod requantization;
pub mod resize;
pub mod roi;
pub mod signal;
pub mod strides;
pub mod timing;
