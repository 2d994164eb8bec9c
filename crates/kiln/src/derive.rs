//! What to differentiate, as the bindings ask for it: the CLI's `--grad`,
//! `--grad-of` and `--jacobian`, Python's `grad=`, `grad_of=` and
//! `jacobian=`. The transforms themselves are [`kiln_ir::grad`]'s; this
//! only applies one to a verified graph and verifies the result.

use kiln_ir::grad::{gradient, jacobian};
use kiln_ir::{verify, Verified};

/// A request for derivatives of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Derivatives {
    /// Reverse mode: the inputs to take the gradient with respect to.
    pub grad: Vec<String>,
    /// The output whose elements' sum is differentiated (the only output
    /// when `None`).
    pub grad_of: Option<String>,
    /// Forward mode: the scalar inputs to take every output's derivative
    /// with respect to, element by element.
    pub jacobian: Vec<String>,
}

impl Derivatives {
    /// True when it asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.grad.is_empty() && self.jacobian.is_empty() && self.grad_of.is_none()
    }

    /// The graph with the derivatives asked for as further outputs
    /// ([`gradient`]: `grad_<x>`; [`jacobian`]: `d<out>/d<p>`), verified;
    /// `graph` itself when it asks for nothing. The error says what cannot
    /// be differentiated, naming the input, output or node.
    pub fn apply(&self, graph: Verified) -> Result<Verified, String> {
        if self.is_empty() {
            return Ok(graph);
        }
        if !self.grad.is_empty() && !self.jacobian.is_empty() {
            return Err("ask for a gradient or a Jacobian, not both".to_string());
        }
        let derived = if self.jacobian.is_empty() {
            if self.grad.is_empty() {
                return Err("an output to differentiate was named, but no input to differentiate with respect to".to_string());
            }
            gradient(&graph, self.grad_of.as_deref(), &names(&self.grad), false)
        } else {
            if self.grad_of.is_some() {
                return Err(
                    "a Jacobian differentiates every output: drop the output's name".to_string(),
                );
            }
            jacobian(&graph, &names(&self.jacobian))
        };
        let derived = derived.map_err(|e| match e.node {
            Some(v) => format!("{v}: {}", e.message),
            None => e.message,
        })?;
        verify(derived)
            .map_err(|e| format!("the derivative graph does not verify (a bug in kiln): {e}"))
    }
}

fn names(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
