//! The Node package's wasm host (`crates/node/wasm.js`) in the differential
//! test: random graphs (`kiln-fuzzgen`) compiled to wasm32 modules by
//! `kiln::aot` (with their `kiln.abi` and `kiln.constants` sections), run
//! by Node's own WebAssembly through `wasm.js`, must agree with the
//! interpreter bit for bit, as every engine must. One `node` process serves
//! every run (`crates/node/testing/wasm_host.js`, a JSON line each way).

#![cfg(feature = "llvm")]

use kiln::aot::{AotOptions, Emit};
use kiln::ir::entities::Value;
use kiln::{
    Buffer, CompileOptions, CompileResult, DType, Data, Engine, ExecError, ExecResult, Program,
    Scalar, Verified,
};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The `node` host, shared by every program of the test.
struct Host {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn host() -> &'static Mutex<Host> {
    static HOST: OnceLock<Mutex<Host>> = OnceLock::new();
    HOST.get_or_init(|| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/node/testing/wasm_host.js");
        let mut child = Command::new("node")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs (Node.js is part of the set-up: bash .ci/run --setup-only)");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Mutex::new(Host {
            _child: child,
            stdin,
            stdout,
        })
    })
}

/// Compiles to a wasm32 module as `aot --emit wasm` does, written to a file
/// the host reads.
struct NodeWasm {
    dir: PathBuf,
}

impl Engine for NodeWasm {
    type Program = NodeWasmProgram;

    fn name(&self) -> &'static str {
        "node-wasm"
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<NodeWasmProgram>> {
        graphs
            .iter()
            .map(|g| {
                let graph = options.prepare(g)?;
                let aot = AotOptions {
                    optimize: false,
                    ..AotOptions::new("wasm32", Emit::Wasm)
                };
                let bytes = kiln::aot::compile(&graph, &aot)
                    .map_err(|e| kiln::CompileError::Codegen(e.to_string()))?;
                static NEXT: std::sync::atomic::AtomicUsize =
                    std::sync::atomic::AtomicUsize::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let module = self.dir.join(format!("m{n}.wasm"));
                std::fs::write(&module, bytes).expect("writes the module");
                Ok(NodeWasmProgram { graph, module })
            })
            .collect()
    }
}

struct NodeWasmProgram {
    graph: Verified,
    module: PathBuf,
}

fn bits_of(s: Scalar) -> String {
    let bits = match s {
        Scalar::Bool(b) => u64::from(b),
        Scalar::I32(v) => u64::from(v as u32),
        Scalar::F32(v) => u64::from(v.to_bits()),
        other => other.bits(),
    };
    format!("\"{bits:x}\"")
}

fn dtype_name(d: DType) -> String {
    d.to_string()
}

fn scalar_from(dtype: DType, hex: &str) -> Scalar {
    let bits = u64::from_str_radix(hex, 16).expect("hex bits");
    match dtype {
        DType::Bool => Scalar::Bool(bits != 0),
        DType::I32 => Scalar::I32(bits as u32 as i32),
        DType::I64 => Scalar::I64(bits as i64),
        DType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
        DType::F64 => Scalar::F64(f64::from_bits(bits)),
    }
}

impl Program for NodeWasmProgram {
    fn verified(&self) -> &Verified {
        &self.graph
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        let bindings = kiln::ir::exec::bind_inputs(&self.graph, inputs)?;
        let graph = self.graph.graph();
        let mut request = format!(
            "{{\"module\":{:?},\"inputs\":[",
            self.module.display().to_string()
        );
        for (i, (input, data)) in graph.inputs().iter().zip(inputs).enumerate() {
            let tensor = graph.ty(input.value).as_tensor().expect("tensor inputs");
            let shape: Vec<String> = (tensor.shape.iter())
                .map(|d| bindings.extent(d).expect("bound").to_string())
                .collect();
            let bits: Vec<String> = match data {
                Data::Scalar(s) => vec![bits_of(*s)],
                Data::Column(b) => b.iter().map(bits_of).collect(),
                Data::Selection(_) => unreachable!("inputs are no selections"),
            };
            if i > 0 {
                request.push(',');
            }
            request.push_str(&format!(
                "{{\"dtype\":\"{}\",\"scalar\":{},\"shape\":[{}],\"bits\":[{}]}}",
                dtype_name(tensor.dtype),
                matches!(data, Data::Scalar(_)),
                shape.join(","),
                bits.join(",")
            ));
        }
        request.push_str("]}\n");
        let mut host = host().lock().unwrap_or_else(|e| e.into_inner());
        host.stdin
            .write_all(request.as_bytes())
            .expect("writes to node");
        let mut line = String::new();
        host.stdout.read_line(&mut line).expect("reads from node");
        drop(host);
        let reply: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the host's reply is no JSON ({e}): {line}"));
        if let Some(class) = reply.get("error").and_then(|c| c.as_str()) {
            let message = reply["message"].as_str().unwrap_or_default().to_string();
            return Err(match class {
                "DivisionByZeroError" => ExecError::DivisionByZero {
                    node: Value::from_u32(0),
                    name: Some(message),
                },
                "IndexOutOfRangeError" => ExecError::IndexOutOfRange {
                    node: Value::from_u32(0),
                    name: Some(message),
                },
                other => ExecError::Unsupported(format!("{other}: {message}")),
            });
        }
        let outputs = reply["ok"].as_array().expect("outputs");
        Ok(graph
            .outputs()
            .iter()
            .zip(outputs)
            .map(|(o, got)| {
                let bits: Vec<&str> = got["bits"]
                    .as_array()
                    .expect("bits")
                    .iter()
                    .map(|b| b.as_str().expect("hex"))
                    .collect();
                match graph.ty(o.value) {
                    kiln::Type::Selection(_) => Data::Selection(
                        bits.iter()
                            .map(|h| u32::from_str_radix(h, 16).expect("a row"))
                            .collect(),
                    ),
                    kiln::Type::Tensor(t) if t.is_scalar() => {
                        Data::Scalar(scalar_from(t.dtype, bits[0]))
                    }
                    kiln::Type::Tensor(t) => {
                        let mut buffer = Buffer::with_capacity(t.dtype, bits.len());
                        for h in bits {
                            buffer.push(scalar_from(t.dtype, h));
                        }
                        Data::Column(buffer)
                    }
                }
            })
            .collect())
    }
}

/// The imports `wasm.js` computes exactly as C defines them; others (the
/// rare rows kiln's inline math leaves to the C library: huge `sin`, `cos`,
/// `tan` arguments, `pow`'s special cases, `cbrt`'s double-checked
/// roundings) come from JavaScript's `Math`, whose bits may differ there
/// (docs/node.md).
const EXACT: &[&str] = &["fma", "fmaf", "fmod", "fmodf", "nextafter", "nextafterf"];

/// Whether `graph`'s module, as written and optimized, imports only what
/// `wasm.js` computes exactly.
fn imports_exactly(graph: &kiln::Graph) -> bool {
    let verified = kiln::verify(graph.clone()).expect("generated graphs verify");
    let engine = wasmi::Engine::default();
    [false, true].into_iter().all(|optimize| {
        let aot = AotOptions {
            optimize,
            ..AotOptions::new("wasm32", Emit::Wasm)
        };
        let bytes = kiln::aot::compile(&verified, &aot).expect("compiles");
        let module = wasmi::Module::new(&engine, &bytes[..]).expect("a module");
        let exact = module.imports().all(|i| EXACT.contains(&i.name()));
        exact
    })
}

/// Random graphs through `wasm.js` agree with the interpreter.
#[test]
fn the_node_wasm_host_agrees_with_the_interpreter() {
    let dir = std::env::temp_dir().join(format!("kiln-node-wasm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let engines: Vec<Box<dyn kiln::DynEngine>> = vec![Box::new(NodeWasm { dir: dir.clone() })];
    let cases: u32 = std::env::var("DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // `DIFFERENTIAL_SEED` picks other graphs for a long run.
    let seed = std::env::var("DIFFERENTIAL_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0x5851_f42d_4c95_7f2d, |s| s | 1);
    let (mut n_cases, mut inexact) = (0, 0);
    for case in kiln_fuzzgen::seeded(seed, (cases / 10).max(60) as usize, 768) {
        if !imports_exactly(&case.graph) {
            inexact += 1;
            continue;
        }
        n_cases += 1;
        if let Err(report) = kiln_fuzzgen::differential_with(&case, &engines) {
            panic!("{report}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Most graphs call no C math on any row.
    assert!(
        n_cases >= 50 && n_cases >= 4 * inexact,
        "{n_cases} cases compared, {inexact} left out for their imports"
    );
}
