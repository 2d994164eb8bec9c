//! Reading the graph a command works on, and rendering every error about it as
//! `file:line:col: error: message` with the offending line.

use crate::Failure;
use clap::{Args, ValueEnum};
use kiln::{Format, Graph, LoadOptions, Loaded, PyOptions, Type, Verified};
use std::collections::HashMap;
use std::path::PathBuf;

/// Where the source comes from.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// Source file: `.kiln` (text IR), `.py` (Python subset), `.fx` or
    /// `graph.txt` (torch.fx), `.pbtxt` or `.pb` (TensorFlow GraphDef), or a
    /// LightGBM text model (any name; its first line is `tree`).
    #[arg(conflicts_with = "expr")]
    pub file: Option<PathBuf>,
    /// Source text given inline, for example `-e 'sin(x) * 2.0'`; it may
    /// start with `-` (`-e '-x * 2'`).
    #[arg(
        short = 'e',
        long = "expr",
        value_name = "EXPR",
        allow_hyphen_values = true
    )]
    pub expr: Option<String>,
    /// Source format, instead of the one the file extension names (`-e` defaults to py).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub from: Option<FormatArg>,
    /// torch.fx: the module's state_dict as `.safetensors`, for get_attr and parameters
    /// (default: `weights.safetensors` beside the graph file, if there is one).
    #[arg(long, value_name = "FILE.safetensors")]
    pub weights: Option<PathBuf>,
    /// torch.fx: the text `print(gm)` writes (the module tree, then the code),
    /// which gives each `call_module` its type and arguments (default:
    /// `module.txt` beside the graph file, if there is one).
    #[arg(long, value_name = "FILE")]
    pub modules: Option<PathBuf>,
    /// torch.fx and TensorFlow: an input's type, such as `x:f32[n]`, `k:i64`
    /// (dtypes bool i32 i64 f32 f64; a shape of `[]` or one dimension).
    #[arg(long = "input", value_name = "NAME:DTYPE[SHAPE]")]
    pub input_types: Vec<String>,
    /// TensorFlow: an output, `node` or `node:k` (default: nodes nobody reads).
    #[arg(long = "output", value_name = "NAME")]
    pub outputs: Vec<String>,
    /// Tree models: the raw scores (LightGBM's `raw_score=True`) instead of
    /// the prediction after the model's link.
    #[arg(long)]
    pub raw_score: bool,
    /// Add the gradient of the output's elements' sum with respect to these
    /// float inputs as outputs `grad_NAME` (reverse mode), such as
    /// `--grad x,w`.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub grad: Vec<String>,
    /// The output `--grad` differentiates (default: the only one).
    #[arg(long, value_name = "OUTPUT", requires = "grad")]
    pub grad_of: Option<String>,
    /// Add every output's derivative, element by element, with respect to
    /// these scalar float inputs as outputs `dOUT/dNAME` (forward mode: a
    /// least-squares fit's Jacobian), such as `--jacobian c0,c1`.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        conflicts_with = "grad"
    )]
    pub jacobian: Vec<String>,
}

/// Parses `NAME:DTYPE[SHAPE]`.
pub fn parse_input_type(spec: &str) -> Result<(String, Type), String> {
    let (name, ty) = spec
        .split_once(':')
        .ok_or_else(|| format!("--input `{spec}` is not NAME:DTYPE[SHAPE]"))?;
    let ty = kiln::parse_type(ty).map_err(|e| format!("--input `{spec}`: {e}"))?;
    Ok((name.trim().to_string(), ty))
}

/// `--from` values.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum FormatArg {
    /// The `.kiln` text IR.
    Kiln,
    /// The Python subset.
    Py,
    /// torch.fx graph text (`print(gm.graph)`).
    Fx,
    /// A TensorFlow GraphDef, text or binary.
    Tf,
    /// A LightGBM text model (`save_model`).
    Lightgbm,
    /// An XGBoost JSON model (`save_model("model.json")`).
    Xgboost,
    /// kiln's tree-model text (`kiln-trees v0`).
    KilnTrees,
}

impl FormatArg {
    fn format(self) -> Format {
        match self {
            FormatArg::Kiln => Format::Kiln,
            FormatArg::Py => Format::Py,
            FormatArg::Fx => Format::Fx,
            FormatArg::Tf => Format::Tf,
            FormatArg::Lightgbm => Format::LightGbm,
            FormatArg::Xgboost => Format::XgBoost,
            FormatArg::KilnTrees => Format::KilnTrees,
        }
    }
}

/// A loaded, verified graph and the name messages give its source.
pub struct Source {
    /// The file name messages use (`<expr>` for `-e`).
    pub name: String,
    /// The verified graph.
    pub verified: Verified,
}

impl Source {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        self.verified.graph()
    }
}

impl SourceArgs {
    /// Reads, parses and verifies the source.
    pub fn load(&self, py: &PyOptions) -> Result<Source, Failure> {
        self.load_typed(py, &HashMap::new(), &HashMap::new())
    }

    /// As [`SourceArgs::load`], with placeholder types taken from input data
    /// (`data_types`, for torch.fx and TensorFlow) or defaults (`fx_defaults`,
    /// for torch.fx only) where `--input` does not give them.
    pub fn load_typed(
        &self,
        py: &PyOptions,
        data_types: &HashMap<String, Type>,
        fx_defaults: &HashMap<String, Type>,
    ) -> Result<Source, Failure> {
        self.load_shaped(py, data_types, fx_defaults, &HashMap::new())
    }

    /// As [`SourceArgs::load_typed`], with TensorFlow placeholders given the
    /// shapes of `--arg` lists (`data_shapes`; their dtype is the graph's).
    pub fn load_shaped(
        &self,
        py: &PyOptions,
        data_types: &HashMap<String, Type>,
        fx_defaults: &HashMap<String, Type>,
        data_shapes: &HashMap<String, kiln::ir::Shape>,
    ) -> Result<Source, Failure> {
        self.load_with(py, data_types, fx_defaults, data_shapes, false)
    }

    /// As [`SourceArgs::load_typed`] for the columns of a CSV file: a tree
    /// model takes one column per feature, by the feature's name.
    pub fn load_for_columns(
        &self,
        py: &PyOptions,
        fx_defaults: &HashMap<String, Type>,
    ) -> Result<Source, Failure> {
        self.load_with(py, &HashMap::new(), fx_defaults, &HashMap::new(), true)
    }

    fn load_with(
        &self,
        py: &PyOptions,
        data_types: &HashMap<String, Type>,
        fx_defaults: &HashMap<String, Type>,
        data_shapes: &HashMap<String, kiln::ir::Shape>,
        columns: bool,
    ) -> Result<Source, Failure> {
        let (name, bytes) = match (&self.file, &self.expr) {
            (_, Some(expr)) => ("<expr>".to_string(), expr.clone().into_bytes()),
            (Some(path), None) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    Failure::Input(format!("{}: error: cannot read: {e}", path.display()))
                })?;
                (path.display().to_string(), bytes)
            }
            (None, None) => {
                return Err(Failure::Input("error: give a FILE or -e EXPR".to_string()))
            }
        };
        let format = match (self.from, &self.file) {
            (Some(f), _) => f.format(),
            (None, None) => Format::Py,
            (None, Some(_)) if self.expr.is_some() => Format::Py,
            (None, Some(path)) => Format::from_path(path).or_else(|| Format::sniff(&bytes)).ok_or_else(|| {
                Failure::Input(format!("{name}: error: cannot tell the format from the file name or its contents; use --from kiln|py|fx|tf|lightgbm|xgboost|kiln-trees"))
            })?,
        };
        let mut opts = LoadOptions {
            py: py.clone(),
            ..LoadOptions::default()
        };
        opts.trees.raw_score = self.raw_score;
        opts.trees.columns = columns;
        let mut types = data_types.clone();
        for spec in &self.input_types {
            let (n, t) =
                parse_input_type(spec).map_err(|e| Failure::Input(format!("error: {e}")))?;
            types.insert(n, t);
        }
        opts.fx.inputs = fx_defaults.clone();
        opts.fx.inputs.extend(types.clone());
        opts.tf.inputs = types;
        opts.tf.shapes = data_shapes.clone();
        opts.tf.outputs = self.outputs.clone();
        // A torch.fx graph's state_dict: `--weights`, else the
        // `weights.safetensors` beside it (the layout the fixtures use).
        let beside = |name: &str| {
            let file = self.file.as_ref()?;
            let path = file.with_file_name(name);
            // A `module.txt` source carries its own tree.
            (format == Format::Fx && path.is_file() && path != *file).then_some(path)
        };
        if let Some(path) = self
            .weights
            .clone()
            .or_else(|| beside("weights.safetensors"))
        {
            let bytes = std::fs::read(&path).map_err(|e| {
                Failure::Input(format!("{}: error: cannot read: {e}", path.display()))
            })?;
            opts.fx.weights = kiln::frontend::fx::read_weights(&bytes)
                .map_err(|e| Failure::Input(format!("{}: error: {}", path.display(), e.message)))?;
        }
        if let Some(path) = self.modules.clone().or_else(|| beside("module.txt")) {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Failure::Input(format!("{}: error: cannot read: {e}", path.display()))
            })?;
            opts.fx.modules = kiln::frontend::fx::modules::parse(&text)
                .map_err(|e| Failure::Input(e.render(&path.display().to_string(), &text)))?;
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let Loaded { graph, source_map } =
            kiln::load_bytes(&bytes, format, &opts).map_err(|e| {
                Failure::Input(if std::str::from_utf8(&bytes).is_ok() {
                    e.render(&name, &text)
                } else {
                    format!("{name}: error: {}", e.message)
                })
            })?;
        let verified =
            kiln::verify_located(graph, &source_map, &name, &text).map_err(Failure::Input)?;
        let derivatives = kiln::Derivatives {
            grad: self.grad.clone(),
            grad_of: self.grad_of.clone(),
            jacobian: self.jacobian.clone(),
        };
        let verified = derivatives
            .apply(verified)
            .map_err(|e| Failure::Input(format!("{name}: error: {e}")))?;
        Ok(Source { name, verified })
    }
}
