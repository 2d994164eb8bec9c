//! kiln's frontends: each turns a source language into a [`kiln_ir::Graph`]
//! through the builder, and knows nothing of any backend.
//!
//! - [`py`]: a Python subset: single expressions (`sin(x0) * (x1 + 2.5)`) and
//!   functions (`def f(x: float): …`), with Python 3 and NumPy meanings.
//! - [`fx`]: torch.fx graphs as `print(gm.graph)` writes them, with torch's
//!   meanings, and their weights from `.safetensors`.
//! - [`tf`]: TensorFlow GraphDefs, text (`.pbtxt`) and binary (`.pb`), with
//!   TensorFlow's meanings.
//! - [`trees`]: tree-ensemble models (LightGBM's text model), with the
//!   library's meanings.
//!
//! Every frontend reports bad input as a located [`kiln_ir::ParseError`], never a
//! panic, and bounds its recursion so deep input cannot overflow the stack.

pub mod cnn;
pub mod eltwise;
pub mod fx;
pub mod layout;
pub mod py;
pub mod tf;
pub mod trees;
mod unsupported;
