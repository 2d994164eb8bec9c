//! The module tree `print(gm)` writes above a GraphModule's code, which names
//! the type and arguments of every `call_module` target that
//! `print(gm.graph)` leaves bare:
//!
//! ```text
//! Sequential(
//!   (0): Linear(in_features=4, out_features=8, bias=True)
//!   (1): ReLU()
//!   (block): Sequential(
//!     (0): GELU(approximate='tanh')
//!   )
//! )
//! ```
//!
//! Targets are the dotted paths (`0`, `block.0`). [`apply`] turns each
//! `call_module` node of a known type into the functional call torch's module
//! makes (`LeakyReLU(negative_slope=0.2)` is `leaky_relu(x,
//! negative_slope=0.2)`); a type kiln does not import becomes a call the
//! unsupported-op report names (`nn.Conv2d`), so every such type is reported
//! together. Parsing is line by line: nothing recurses on the tree's depth.

use super::text::{Arg, FxGraph};
use kiln_ir::{ParseError, ParseResult};
use std::collections::HashMap;

/// One submodule: its type and the arguments its repr shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The type's name (`Linear`, `ReLU`, `Conv2d`).
    pub kind: String,
    /// Positional arguments (`Conv2d(3, 8, …)`).
    pub args: Vec<Arg>,
    /// Keyword arguments, in order.
    pub kwargs: Vec<(String, Arg)>,
}

/// True when `src` starts like `print(gm)` (a module repr), not like
/// `print(gm.graph)`.
pub fn looks_like_module_repr(src: &str) -> bool {
    let first = src.lines().map(str::trim).find(|l| !l.is_empty());
    // `Sequential(` opens a tree; `LinearModule()` is a root without children.
    let opens = |l: &str| !l.starts_with("graph(") && (l.ends_with('(') || l.ends_with("()"));
    first.is_some_and(opens) && src.contains("def forward(self")
}

/// Reads the module tree at the start of `src` (up to the generated code),
/// keyed by dotted target path.
pub fn parse(src: &str) -> ParseResult<HashMap<String, Module>> {
    let mut modules = HashMap::new();
    let mut path: Vec<String> = Vec::new();
    let mut root_open = false;
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text.starts_with("def ") || text.starts_with('#') {
            break;
        }
        if !root_open {
            // `Sequential(` opens the tree; `LinearModule()` is a leaf root.
            if text.ends_with('(') {
                root_open = true;
                continue;
            }
            break;
        }
        if text == ")" {
            if path.pop().is_none() {
                root_open = false;
            }
            continue;
        }
        let text_at = at + line.find(text).unwrap_or(0);
        let err = |m: String| ParseError::at(src, text_at, m);
        let Some(rest) = text.strip_prefix('(') else {
            return Err(err(format!(
                "expected `(name): Type(…)` in the module tree, found `{text}`"
            )));
        };
        let Some((name, rest)) = rest.split_once("): ") else {
            return Err(err(format!("expected `(name): Type(…)`, found `{text}`")));
        };
        let target = path
            .iter()
            .map(String::as_str)
            .chain([name])
            .collect::<Vec<_>>()
            .join(".");
        if rest.ends_with('(') {
            // A container: its children follow, one level deeper.
            path.push(name.to_string());
            let kind = rest.trim_end_matches('(').to_string();
            modules.insert(
                target,
                Module {
                    kind,
                    args: Vec::new(),
                    kwargs: Vec::new(),
                },
            );
            continue;
        }
        let (kind, _) = rest
            .split_once('(')
            .ok_or_else(|| err(format!("expected `Type(…)` after `({name}):`")))?;
        // `(name): Kind(` precedes the arguments.
        let start = text_at + 1 + name.len() + "): ".len() + kind.len() + 1;
        let end = at + line.trim_end().len();
        let (args, kwargs) = super::text::parse_call_args(src, start, end)
            .map_err(|e| err(format!("module `{target}` ({kind}): {}", e.message)))?;
        modules.insert(
            target,
            Module {
                kind: kind.trim().to_string(),
                args,
                kwargs,
            },
        );
    }
    Ok(modules)
}

/// What a module type lowers as: the functional op torch's `forward` calls,
/// and which of its keyword arguments that op takes.
fn functional(kind: &str) -> Option<(&'static str, &'static [&'static str])> {
    Some(match kind {
        "ReLU" => ("relu", &[]),
        "ReLU6" => ("relu6", &[]),
        "Sigmoid" => ("sigmoid", &[]),
        "Tanh" => ("tanh", &[]),
        "SiLU" => ("silu", &[]),
        "Mish" => ("mish", &[]),
        "SELU" => ("selu", &[]),
        "LogSigmoid" => ("logsigmoid", &[]),
        "Hardsigmoid" => ("hardsigmoid", &[]),
        "Hardswish" => ("hardswish", &[]),
        "Softsign" => ("softsign", &[]),
        "Tanhshrink" => ("tanhshrink", &[]),
        "GELU" => ("gelu", &["approximate"]),
        "LeakyReLU" => ("leaky_relu", &["negative_slope"]),
        "ELU" => ("elu", &["alpha"]),
        "CELU" => ("celu", &["alpha"]),
        "Softplus" => ("softplus", &["beta", "threshold"]),
        "Hardtanh" => ("hardtanh", &["min_val", "max_val"]),
        "Softmax" => ("softmax", &["dim"]),
        "LogSoftmax" => ("log_softmax", &["dim"]),
        "Flatten" => ("flatten", &["start_dim", "end_dim"]),
        "MaxPool2d" => (
            "max_pool2d",
            &[
                "kernel_size",
                "stride",
                "padding",
                "dilation",
                "ceil_mode",
                "return_indices",
            ],
        ),
        "AvgPool2d" => (
            "avg_pool2d",
            &[
                "kernel_size",
                "stride",
                "padding",
                "ceil_mode",
                "count_include_pad",
                "divisor_override",
            ],
        ),
        "AdaptiveAvgPool2d" => ("adaptive_avg_pool2d", &["output_size"]),
        // Inference: dropout is the identity (the graph is traced in eval).
        "Identity" | "Dropout" | "Dropout1d" | "Dropout2d" | "Dropout3d" | "AlphaDropout" => {
            ("identity", &[])
        }
        _ => return None,
    })
}

/// A module with parameters as the functional call its `forward` makes,
/// the parameters named (`Arg::Name("0.weight")`, which the import reads
/// from the weights as a `get_attr` would): `Conv2d` is `conv2d(x, weight,
/// bias, stride, padding, dilation, groups)`, `BatchNorm2d` in eval mode
/// `batch_norm(x, running_mean, running_var, weight, bias, eps=…)`. A
/// batch norm without running statistics normalizes by the batch's own,
/// which kiln does not import: it stays `nn.BatchNorm2d`, reported.
fn with_parameters(target: &str, module: &Module) -> Option<(&'static str, Vec<(String, Arg)>)> {
    let kwarg = |key: &str| module.kwargs.iter().find(|(k, _)| k == key).map(|(_, a)| a);
    let param = |name: &str| Arg::Name(format!("{target}.{name}"));
    let keep = |keys: &[&str]| -> Vec<(String, Arg)> {
        module
            .kwargs
            .iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .cloned()
            .collect()
    };
    match module.kind.as_str() {
        "Conv2d" => {
            let bias = match kwarg("bias") {
                Some(Arg::Bool(false)) => Arg::None,
                _ => param("bias"),
            };
            let mut kwargs = vec![
                ("weight".to_string(), param("weight")),
                ("bias".to_string(), bias),
            ];
            kwargs.extend(keep(&[
                "stride",
                "padding",
                "dilation",
                "groups",
                "padding_mode",
            ]));
            Some(("conv2d", kwargs))
        }
        "BatchNorm2d" => {
            if matches!(kwarg("track_running_stats"), Some(Arg::Bool(false))) {
                return None;
            }
            let mut kwargs = vec![
                ("running_mean".to_string(), param("running_mean")),
                ("running_var".to_string(), param("running_var")),
            ];
            if !matches!(kwarg("affine"), Some(Arg::Bool(false))) {
                kwargs.push(("weight".to_string(), param("weight")));
                kwargs.push(("bias".to_string(), param("bias")));
            }
            kwargs.extend(keep(&["eps"]));
            Some(("batch_norm", kwargs))
        }
        _ => None,
    }
}

/// Gives every `call_module` node of `g` whose target `modules` names its
/// module's meaning: `Linear` stays a module call (the weights give its
/// parameters), a known activation or layout module becomes its functional
/// call, and any other type a call of `nn.TYPE`, which the import reports as
/// unsupported with the others.
pub fn apply(g: &mut FxGraph, modules: &HashMap<String, Module>) {
    for node in &mut g.nodes {
        if node.kind != "call_module" {
            continue;
        }
        let Some(module) = modules.get(&node.target) else {
            continue;
        };
        if module.kind == "Linear" {
            continue;
        }
        node.kind = "call_function".to_string();
        if let Some((op, kwargs)) = with_parameters(&node.target, module) {
            node.target = format!("torch.nn.functional.{op}");
            node.kwargs.extend(kwargs);
            continue;
        }
        match functional(&module.kind) {
            Some((op, keys)) => {
                node.target = format!("torch.nn.functional.{op}");
                node.kwargs.extend(
                    module
                        .kwargs
                        .iter()
                        .filter(|(k, _)| keys.contains(&k.as_str()))
                        .cloned(),
                );
            }
            None => node.target = format!("nn.{}", module.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_tree_with_arguments() {
        let src = "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=True)\n  (1): LeakyReLU(negative_slope=0.2)\n  (block): Sequential(\n    (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1))\n    (1): GELU(approximate='tanh')\n  )\n  (2): Softplus(beta=2.0, threshold=10.0)\n)\n\n\n\ndef forward(self, input):\n    pass\n";
        let m = parse(src).unwrap();
        assert_eq!(m["0"].kind, "Linear");
        assert_eq!(m["1"].kwargs, [("negative_slope".into(), Arg::Float(0.2))]);
        assert_eq!(m["block"].kind, "Sequential");
        assert_eq!(m["block.0"].args, [Arg::Int(3), Arg::Int(8)]);
        assert_eq!(
            m["block.0"].kwargs[0],
            (
                "kernel_size".into(),
                Arg::Seq(vec![Arg::Int(3), Arg::Int(3)])
            )
        );
        assert_eq!(
            m["block.1"].kwargs,
            [("approximate".into(), Arg::Str("tanh".into()))]
        );
        assert_eq!(m["2"].kind, "Softplus");
        assert!(looks_like_module_repr(src));
        assert!(!looks_like_module_repr("graph():\n    return x\n"));
        assert!(parse("LinearModule()\n\n\n\ndef forward(self, input):\n")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn argument_offsets_follow_the_name() {
        let m = parse("Sequential(\n  (2): ReLU()\n  (10): Dropout(p=0.5, inplace=False)\n)\n")
            .unwrap();
        assert_eq!(m["2"].kind, "ReLU");
        assert_eq!(m["10"].kwargs[0], ("p".into(), Arg::Float(0.5)));
    }

    #[test]
    fn malformed_trees_are_located_errors() {
        let e = parse("Sequential(\n  (0) Linear()\n)\n").unwrap_err();
        assert_eq!(e.loc.line, 2, "{e}");
        let e = parse("Sequential(\n  (0): Linear(in_features=4, out_features=\n)\n").unwrap_err();
        assert!(e.to_string().contains("module `0` (Linear)"), "{e}");
    }
}
