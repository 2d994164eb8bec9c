//! The `kiln` binary end to end: outputs, exit statuses (0 ok, 1 run-time
//! error, 2 bad input) and located messages, never a panic.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Every tier this build has (the default build has no LLVM tier).
fn tiers() -> &'static [&'static str] {
    if cfg!(feature = "llvm") {
        &["interp", "vm", "cranelift", "llvm"]
    } else {
        &["interp", "vm", "cranelift"]
    }
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("kiln runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples")
        .join(name)
        .display()
        .to_string()
}

fn temp_file(name: &str, contents: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("temp file");
    path.display().to_string()
}

/// Asserts a bad-input failure: exit 2, a located `error:`, no panic.
fn assert_bad_input(out: &Output, located: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(located) && err.contains("error:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn run_prints_outputs() {
    let out = kiln(&[
        "run",
        "-e",
        "(2+3*b+33*(10/2)+1+3/3+a)/2",
        "--arg",
        "a=1",
        "--arg",
        "b=2",
    ]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("out = 88.0\n", Some(0))
    );
    let out = kiln(&["run", &example("fn.py"), "--arg", "x=2.0"]);
    assert_eq!(stdout(&out), "a = 4.0\n");
    let out = kiln(&[
        "run", "-e", "x, x * 2", "--arg", "x=0.1", "--tier", "interp", "--no-opt",
    ]);
    assert_eq!(stdout(&out), "x = 0.1\nout1 = 0.2\n");
}

/// `--grad` and `--jacobian` add derivatives as outputs on every tier;
/// bad requests are located input errors.
#[test]
fn derivatives_are_outputs_on_every_tier() {
    for tier in tiers() {
        let out = kiln(&[
            "run",
            "-e",
            "x * w + sin(w)",
            "--grad",
            "x,w",
            "--arg",
            "x=2",
            "--arg",
            "w=0",
            "--tier",
            tier,
        ]);
        assert_eq!(
            stdout(&out),
            "out = 0.0\ngrad_x = 0.0\ngrad_w = 3.0\n",
            "{tier}: {}",
            stderr(&out)
        );
        let out = kiln(&[
            "run",
            "-e",
            "c0 * x + c1",
            "--input",
            "x:f64[n]",
            "--jacobian",
            "c0,c1",
            "--arg",
            "x=[1.5, -2.0]",
            "--arg",
            "c0=2",
            "--arg",
            "c1=1",
            "--tier",
            tier,
        ]);
        assert_eq!(
            stdout(&out),
            "out = [4.0, -3.0]\ndout/dc0 = [1.5, -2.0]\ndout/dc1 = [1.0, 1.0]\n",
            "{tier}: {}",
            stderr(&out)
        );
    }
    let out = kiln(&["run", "-e", "x * 2.0", "--grad", "y", "--arg", "x=1"]);
    assert_bad_input(
        &out,
        "<expr>: error: cannot differentiate with respect to `y`",
    );
    let out = kiln(&[
        "run",
        "-e",
        "nextafter(x, 1.0)",
        "--grad",
        "x",
        "--arg",
        "x=1",
    ]);
    assert_bad_input(&out, "`nextafter`");
    let pop = temp_file("grad_pop.txt", b"x * 2.0\n");
    let out = kiln(&[
        "eval",
        "--population",
        &pop,
        "--csv",
        &example("x.csv"),
        "--grad",
        "x",
    ]);
    assert_bad_input(&out, "with --population, --fit fits");
}

#[test]
fn ir_opt_keeps_only_live_nodes() {
    let out = kiln(&["ir", &example("fn.py"), "--opt"]);
    let text = stdout(&out);
    assert_eq!(text.matches(" = add ").count(), 1, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with('v')).count(),
        3,
        "{text}"
    );
    let out = kiln(&["ir", &example("fn.py")]);
    assert!(stdout(&out).matches(" = add ").count() > 1);
    // What `ir` prints is a `.kiln` file that runs the same.
    let path = temp_file("fn.kiln", stdout(&out).as_bytes());
    assert_eq!(
        stdout(&kiln(&["run", &path, "--arg", "x=2.0"])),
        "a = 4.0\n"
    );
}

#[test]
fn eval_over_csv() {
    let out = kiln(&[
        "eval",
        "-e",
        "(x > 2.0) & (x < 6.0)",
        "--csv",
        &example("x.csv"),
    ]);
    let rows: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(rows[0], "out");
    let trues: Vec<usize> = rows[1..]
        .iter()
        .enumerate()
        .filter(|(_, r)| *r == "true")
        .map(|(i, _)| i)
        .collect();
    assert_eq!((trues, rows.len()), (vec![3, 4, 5], 11));
    let out_path = temp_file("query-out.csv", b"");
    let out = kiln(&[
        "eval",
        &example("query.py"),
        "--csv",
        &example("x.csv"),
        "-o",
        &out_path,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = std::fs::read_to_string(&out_path).expect("output written");
    assert_eq!(
        written.lines().take(5).collect::<Vec<_>>(),
        [
            "mask,out1,out2",
            "false,3,3",
            "false,4,",
            "false,5,",
            "true,,"
        ]
    );
    // A scalar given with --arg broadcasts against the columns.
    let out = kiln(&[
        "eval",
        "-e",
        "x * k",
        "--csv",
        &example("x.csv"),
        "--arg",
        "k=0.5",
    ]);
    assert_eq!(stdout(&out).lines().nth(4), Some("1.5"));
}

#[test]
fn bad_input_exits_2_with_a_location() {
    assert_bad_input(
        &kiln(&["run", "-e", "(x + "]),
        "<expr>:1:6: error: expected an expression",
    );
    let truncated = temp_file("truncated.py", b"def f(x):\n    y = (x +\n");
    assert_bad_input(
        &kiln(&["run", &truncated]),
        "truncated.py:3:1: error: expected an expression, found end of input",
    );
    let deep = temp_file(
        "deep.py",
        format!("{}x{}", "(".repeat(50_000), ")".repeat(50_000)).as_bytes(),
    );
    assert_bad_input(
        &kiln(&["check", &deep]),
        "deep.py:1:201: error: expression nested too deeply",
    );
    let garbage = temp_file("garbage.kiln", b"v0: f64 = input \"x\"\n\x7f\x01 ]]== v9\n");
    assert_bad_input(&kiln(&["check", &garbage]), "garbage.kiln:2:1: error:");
    let binary = temp_file("binary.py", &[0xff, 0xfe, 0x00, 0x80]);
    assert_bad_input(
        &kiln(&["run", &binary]),
        "binary.py: error: the source is not UTF-8 text",
    );
    let invalid = temp_file("invalid.kiln", b"v0: f64 = input \"x\"\nv1: i64 = const 1\nv2: f64 = add v0, v1\noutput \"y\" = v2\noutput \"y\" = v0\n");
    let out = kiln(&["check", &invalid]);
    assert_bad_input(
        &out,
        "invalid.kiln:3:1: error: v2: `add` takes operands of one dtype",
    );
    assert!(
        stderr(&out).contains("output name `y` is empty or used twice"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_arguments_exit_2() {
    assert_bad_input(&kiln(&["run", "-e", "x"]), "missing --arg x=VALUE");
    assert_bad_input(
        &kiln(&["run", "-e", "x", "--arg", "x=abc"]),
        "`abc` is not a valid f64 literal",
    );
    assert_bad_input(
        &kiln(&["run", "-e", "x", "--arg", "y=1"]),
        "the graph has no input `y`",
    );
    assert_bad_input(
        &kiln(&["run", "-e", "x", "--arg", "novalue"]),
        "is not NAME=VALUE",
    );
    assert_bad_input(
        &kiln(&["eval", "-e", "z * 2", "--csv", &example("x.csv")]),
        "no column `z` (the columns are: x)",
    );
    let bad_csv = temp_file("bad.csv", b"x\n1.0\noops\n");
    assert_bad_input(
        &kiln(&["eval", "-e", "x * 2", "--csv", &bad_csv]),
        "bad.csv:3: error: column `x`",
    );
    let unknown_ext = temp_file("notes.txt", b"x");
    assert_bad_input(&kiln(&["run", &unknown_ext]), "cannot tell the format");
    assert_eq!(kiln(&["run", "--frobnicate"]).status.code(), Some(2));
    assert_eq!(
        kiln(&["run", "-e", "x", "--tier", "warp-drive"])
            .status
            .code(),
        Some(2)
    );
    for threads in ["--threads=0", "--threads=-1", "--threads=many"] {
        let out = kiln(&["run", "-e", "x", "--arg", "x=1", threads]);
        assert_eq!(out.status.code(), Some(2), "--threads {threads}");
        assert!(stderr(&out).contains("--threads"), "{}", stderr(&out));
    }
}

#[test]
fn threads_keep_the_bits() {
    // A filter over 20,000 rows at 1 and 3 threads (KILN_NUM_THREADS is the
    // default; --threads sets it): the same selection, ascending.
    let xs: Vec<String> = (0..20_000)
        .map(|i| format!("{}", (i * 37 % 101) as f64))
        .collect();
    let arg = format!("x=[{}]", xs.join(", "));
    let src = "def f(x: float[n]): return filter(x > 50.0), x * 2.0 + 1.0";
    let mut runs = Vec::new();
    for threads in ["1", "3"] {
        for tier in tiers() {
            let out = kiln(&[
                "run",
                "-e",
                src,
                "--arg",
                &arg,
                "--tier",
                tier,
                "--threads",
                threads,
            ]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            runs.push(stdout(&out));
        }
    }
    assert!(runs.iter().all(|r| *r == runs[0]));
    assert!(runs[0].starts_with("out0 = [2, 5, "), "{}", &runs[0][..40]);
}

#[test]
fn check_reports_signature() {
    let out = kiln(&["check", &example("query.py")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).ends_with("query.py: ok: 9 nodes; inputs (x: f64[n]); outputs (mask: bool[n], out1: sel[n], out2: i64)\n"), "{}", stdout(&out));
    let out = kiln(&["run", &example("query.py"), "--arg", "x=[1.0, 3.0, nan]"]);
    assert_eq!(
        stdout(&out),
        "mask = [false, true, false]\nout1 = [1]\nout2 = 1\n"
    );
}

#[test]
fn population_mode_compiles_every_line_and_agrees_with_the_interpreter() {
    let pop = temp_file(
        "pop.txt",
        b"x * 2.0\n\n# a comment\nsin(x) + 1.0\n3.0 - 1.5\n",
    );
    let csv = example("x.csv");
    let interp = stdout(&kiln(&[
        "eval",
        "--population",
        &pop,
        "--csv",
        &csv,
        "--target-column",
        "x",
        "--tier",
        "interp",
    ]));
    for tier in tiers() {
        let out = kiln(&[
            "eval",
            "--population",
            &pop,
            "--csv",
            &csv,
            "--target-column",
            "x",
            "--stats",
            "--threads",
            "2",
            "--tier",
            tier,
        ]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
        // MSE of 2x against x over 0..9 is mean(x^2) = 28.5; of 1.5 it is
        // mean((1.5 - x)^2). sin is the libm crate's on every tier.
        assert_eq!(lines.len(), 3, "{tier}");
        assert_eq!(
            (lines[0].as_str(), lines[2].as_str()),
            ("28.5", "17.25"),
            "{tier}"
        );
        assert!(
            stderr(&out).contains("node-evaluations"),
            "{}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), interp, "{tier}");
    }
    let first = kiln(&["eval", "--population", &pop, "--csv", &csv]);
    assert_eq!(stdout(&first).lines().next(), Some("0.0,2.0,4.0,6.0,8.0"));
    let bad = temp_file("bad_pop.txt", b"x + 1.0\nx +* 2\n");
    assert_bad_input(
        &kiln(&["eval", "--population", &bad, "--csv", &csv]),
        "bad_pop.txt:2:4: error: expected an expression",
    );
}

/// `--dtype f32` computes in `f32`: the columns rounded to it, the values
/// printed as `f32`s, the MSE summed in `f64`; the same on every tier.
#[test]
fn population_mode_computes_in_f32_when_asked() {
    let pop = temp_file("pop32.txt", b"x * 0.1\n0.1\nx > 4.0\n");
    let csv = example("x.csv");
    let mut first = None;
    for tier in tiers() {
        let run = |extra: &[&str]| {
            let mut args = vec![
                "eval",
                "--population",
                &pop,
                "--csv",
                &csv,
                "--dtype",
                "f32",
                "--tier",
                tier,
            ];
            args.extend_from_slice(extra);
            let out = kiln(&args);
            assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
            (stdout(&out), stderr(&out))
        };
        let (values, _) = run(&[]);
        // 3 * 0.1 in f32 is 0.3 (0.1f32 * 3 rounds to 0.3f32's bits); 0.1f32
        // prints as 0.1.
        assert_eq!(
            values, "0.0,0.1,0.2,0.3,0.4\n0.1,0.1,0.1,0.1,0.1\n0.0,0.0,0.0,0.0,0.0\n",
            "{tier}"
        );
        let (_, stats) = run(&["--stats"]);
        assert!(stats.contains("rows, f32, tier"), "{stats}");
        let (mse, _) = run(&["--target-column", "x"]);
        match &first {
            None => first = Some(mse),
            Some(f) => assert_eq!(&mse, f, "{tier}"),
        }
    }
    // 0.1 rounded to f32, against x = 0..9: mean((0.1f32 - x)^2) in f64.
    let c = f64::from(0.1f32);
    let want = (0..10).map(|x| (c - f64::from(x)).powi(2)).sum::<f64>() / 10.0;
    let mse = first.expect("tiers");
    assert_eq!(mse.lines().nth(1), Some(format!("{want:?}").as_str()));
    assert_bad_input(
        &kiln(&[
            "eval",
            "--population",
            &pop,
            "--csv",
            &csv,
            "--dtype",
            "f16",
        ]),
        "a population's dtype is f64 (float64) or f32 (float32), not `f16`",
    );
}

/// `--fit` fits each expression's float literals to the target column and
/// prints the error, the steps and the fitted text, the same on every tier.
#[test]
fn population_fit_recovers_constants_on_every_tier() {
    let rows: String = (0..40)
        .map(|i| {
            let x = f64::from(i) / 10.0;
            format!("{x},{}\n", 2.5 * (1.3 * x).sin() + 0.5)
        })
        .collect();
    let csv = temp_file("fit.csv", format!("x,y\n{rows}").as_bytes());
    let pop = temp_file("fit_pop.txt", b"sin(1.0 * x) * 2.0 + 0.0\nsqrt(x - 3.0)\n");
    let mut first = None;
    for tier in tiers() {
        let out = kiln(&[
            "eval",
            "--population",
            &pop,
            "--csv",
            &csv,
            "--target-column",
            "y",
            "--fit",
            "--tier",
            tier,
        ]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        let fields: Vec<&str> = lines[0].split('\t').collect();
        assert!(fields[0].parse::<f64>().unwrap() < 1e-12, "{tier}: {text}");
        assert!(fields[2].starts_with("sin(1.3"), "{tier}: {text}");
        assert!(
            lines[1]
                .ends_with("sqrt(x - 3.0)\t# kept: it is NaN or infinite at its initial constants"),
            "{tier}: {text}"
        );
        match &first {
            None => first = Some(text),
            Some(f) => assert_eq!(&text, f, "{tier}"),
        }
    }
    // The population's values are not compiled first: an expression that
    // does not parse is still bad input at its line, and `--stats` says
    // what the fit took.
    let bad = temp_file("fit_bad.txt", b"sin(1.0 * x)\n2.0 * (x +\n");
    let fit = |pop: &str, extra: &[&str]| {
        let mut argv = vec![
            "eval",
            "--population",
            pop,
            "--csv",
            &csv,
            "--target-column",
            "y",
            "--fit",
        ];
        argv.extend_from_slice(extra);
        kiln(&argv)
    };
    assert_bad_input(&fit(&bad, &[]), "fit_bad.txt:2:11: error:");
    let out = fit(&pop, &["--stats", "--max-iter", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fit: ")
            && stderr(&out).contains("at most 3 Levenberg-Marquardt steps"),
        "{}",
        stderr(&out)
    );
    let steps: usize = stdout(&out)
        .lines()
        .next()
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3).contains(&steps), "{}", stdout(&out));
}

#[test]
fn ir_emits_kernels_and_clif() {
    let kernel = stdout(&kiln(&["ir", &example("query.py"), "--emit", "kernel"]));
    assert!(
        kernel.contains("loop r") && kernel.contains("select_push"),
        "{kernel}"
    );
    // One pass over the rows: the mask, the filter and the sum share one loop,
    // whose rows the sum makes sequential; parameters print as `p0`.
    assert_eq!(kernel.matches("loop ").count(), 1, "{kernel}");
    assert!(kernel.contains("loop r2 in 0..p1 sequential {"), "{kernel}");
    assert!(
        kernel.contains("load p0[r2]") && kernel.contains("select_push p3,"),
        "{kernel}"
    );
    let clif = stdout(&kiln(&["ir", &example("fn.py"), "--emit", "clif"]));
    assert!(
        clif.starts_with("; v0 = x\n") && clif.contains("fadd"),
        "{clif}"
    );
}

#[test]
fn division_by_zero_exits_1_on_every_tier() {
    for tier in tiers() {
        let out = kiln(&[
            "run",
            "-e",
            "def f(a: int, b: int):\n    q = a // b\n    return q",
            "--arg",
            "a=1",
            "--arg",
            "b=0",
            "--tier",
            tier,
        ]);
        assert_eq!(out.status.code(), Some(1), "{tier}");
        assert!(
            stderr(&out).contains("integer division by zero in v2 (`q`)"),
            "{tier}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn the_nnc_kernel_runs_fused_on_every_tier() {
    let kernel = stdout(&kiln(&["ir", &example("nnc.py"), "--emit", "kernel"]));
    assert_eq!(kernel.matches("loop ").count(), 1, "{kernel}");
    let eval = |tier| {
        let csv = example("x.csv");
        let out = kiln(&["eval", &example("nnc.py"), "--csv", &csv, "--tier", tier]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        stdout(&out)
    };
    let interp = eval("interp");
    // x = 0: a = 0, b = 0, c = 1, d = 1, f = 1, so d + f = 2.
    assert_eq!(interp.lines().nth(1), Some("2.0"));
    for tier in tiers() {
        assert_eq!(eval(tier), interp, "{tier}");
    }
}

/// `kiln sql` runs SQL through DataFusion; a build without the feature `sql`
/// refuses it with the feature's name.
#[test]
fn sql_runs_or_is_refused() {
    let out = kiln(&[
        "sql",
        "SELECT x * 2 AS y FROM (VALUES (1.5), (-4.0)) AS t(x) WHERE x > 0",
    ]);
    if cfg!(feature = "sql") {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "y\n3.0\n");
    } else {
        assert_bad_input(&out, "--features sql");
    }
}

/// The LLVM tier's dumps; without the feature, every LLVM request is refused
/// with the feature's name.
#[test]
fn the_llvm_tier_dumps_ir_and_assembly_or_is_refused() {
    let nnc = example("nnc.py");
    if cfg!(not(feature = "llvm")) {
        let csv = example("x.csv");
        assert_bad_input(
            &kiln(&["eval", &nnc, "--csv", &csv, "--tier", "llvm"]),
            "--features llvm",
        );
        assert_bad_input(
            &kiln(&["ir", &example("fn.py"), "--emit", "llvm-ir"]),
            "--features llvm",
        );
        return;
    }
    let ir = stdout(&kiln(&["ir", &example("fn.py"), "--emit", "llvm-ir"]));
    assert!(ir.contains("%a = fadd double %x, 2.0"), "{ir}");
    let asm = stdout(&kiln(&["ir", &nnc, "--emit", "asm"]));
    assert!(asm.contains("nnc:"), "{asm}");
    // A graph without a name is dumped as `kernel` (it was an empty module).
    let unnamed = temp_file(
        "unnamed.kiln",
        b"v0: f32[4, 3] = input \"a\"\nv1: f32[3, 5] = input \"b\"\n\
          v2: f32[4, 5] = matmul v0, v1\noutput \"y\" = v2\n",
    );
    let asm = stdout(&kiln(&["ir", &unnamed, "--emit", "asm"]));
    assert!(asm.contains("kernel:") && asm.contains("vfmadd"), "{asm}");
    let ir = stdout(&kiln(&["ir", &unnamed, "--emit", "llvm-ir"]));
    assert!(ir.contains("define") && ir.contains("@kernel("), "{ir}");
}

fn fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

/// A `.npy` file of `f64` values with the given shape.
fn npy_f64(shape: &str, values: &[f64]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for v in values {
        bytes.extend(v.to_le_bytes());
    }
    bytes
}

#[test]
fn torch_fx_and_tensorflow_graphs_from_the_command_line() {
    // The fx tutorial: 2.0 -> 4.0, its dead nodes gone under --opt.
    let seed = fixture("fx/seed_scalar/graph.txt");
    let out = kiln(&["run", &seed, "--input", "x:f64", "--arg", "x=2.0"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("add = 4.0\n", Some(0))
    );
    let ir = stdout(&kiln(&["ir", &seed, "--input", "x:f64", "--opt"]));
    assert!(
        !ir.contains("truediv") && ir.contains("output \"add\""),
        "{ir}"
    );
    // TF, text and binary, with int32 wraparound. The placeholder is a
    // fixed int32[1]; `--input` makes it a column of any length.
    for file in ["tf/seed_int32/graph.pbtxt", "tf/seed_int32/graph.pb"] {
        let out = kiln(&["run", &fixture(file), "--arg", "input=[2147483600]"]);
        assert_eq!(
            stdout(&out),
            "output = [-2147483593]\n",
            "{file}: {}",
            stderr(&out)
        );
        let out = kiln(&[
            "run",
            &fixture(file),
            "--input",
            "input:i32[n]",
            "--arg",
            "input=[10, 2147483600]",
        ]);
        assert_eq!(
            stdout(&out),
            "output = [113, -2147483593]\n",
            "{file}: {}",
            stderr(&out)
        );
    }
    // --output picks an inner node; `--from` overrides the extension.
    let out = kiln(&[
        "run",
        &fixture("tf/seed_int32/graph.pbtxt"),
        "--output",
        "sub",
        "--arg",
        "input=[10]",
    ]);
    assert_eq!(stdout(&out), "sub = [8]\n");
    // Fixture inputs as JSON in, JSON out.
    let case: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("fx/methods_and_ops/case.json")).unwrap(),
    )
    .unwrap();
    let inputs = temp_file("fx_inputs.json", case["inputs"].to_string().as_bytes());
    let out = kiln(&[
        "run",
        &fixture("fx/methods_and_ops/graph.txt"),
        "--inputs",
        &inputs,
        "--json",
        "--tier",
        "interp",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(got[0]["name"], "add_2");
    assert_eq!(got[1]["shape"], serde_json::json!([8]));
    assert_eq!(got[1]["data"].as_array().unwrap().len(), 8);
}

#[test]
fn npy_and_npz_inputs() {
    let npy = temp_file("xs.npy", &npy_f64("(3,)", &[1.0, 2.0, 3.5]));
    let out = kiln(&[
        "run",
        "-e",
        "def f(x: float[n]): return x * 2.0",
        "--inputs",
        &npy,
    ]);
    assert_eq!(stdout(&out), "out = [2.0, 4.0, 7.0]\n", "{}", stderr(&out));
    // An .npz (compressed) with one member per input, by name.
    let path = std::env::temp_dir().join(format!("kiln-cli-test-{}/in.npz", std::process::id()));
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, v) in [("a", 1.5), ("b", -4.0)] {
            zip.start_file(format!("{name}.npy"), opts).unwrap();
            std::io::Write::write_all(&mut zip, &npy_f64("()", &[v])).unwrap();
        }
        zip.finish().unwrap();
    }
    let out = kiln(&[
        "run",
        "-e",
        "a * b",
        "--inputs",
        &path.display().to_string(),
    ]);
    assert_eq!(stdout(&out), "out = -6.0\n", "{}", stderr(&out));
    // Bad data: located messages, exit 2.
    let bad_json = temp_file(
        "bad.json",
        br#"{"x": {"dtype": "float64", "shape": [2], "data": [1.0]}}"#,
    );
    assert_bad_input(
        &kiln(&[
            "run",
            "-e",
            "def f(x: float[n]): return x",
            "--inputs",
            &bad_json,
        ]),
        "holds 2 elements",
    );
    let truncated = temp_file("t.npy", &npy_f64("(30,)", &[1.0])[..]);
    assert_bad_input(
        &kiln(&[
            "run",
            "-e",
            "def f(x: float[n]): return x",
            "--inputs",
            &truncated,
        ]),
        "the shape needs",
    );
    let garbage = temp_file("g.npz", b"PK\x03\x04garbage");
    assert_bad_input(
        &kiln(&["run", "-e", "x", "--inputs", &garbage]),
        "not a .npz",
    );
    let matrix = temp_file("m.npy", &npy_f64("(2, 2)", &[1.0, 2.0, 3.0, 4.0]));
    assert_bad_input(
        &kiln(&[
            "run",
            "-e",
            "def f(x: float[n]): return x",
            "--inputs",
            &matrix,
        ]),
        "the input is f64[n], but the data has shape [2, 2]",
    );
}

#[test]
fn importer_errors_exit_2_and_name_every_unsupported_op() {
    let tf = temp_file(
        "ops.pbtxt",
        br#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 4 } dim { size: 3 } } } } }
node { name: "s" op: "Tile" input: "x" input: "x" }
node { name: "f" op: "Frobnicate" input: "s" }
"#,
    );
    assert_bad_input(
        &kiln(&["check", &tf]),
        "ops Frobnicate (`f`); tensor ops Tile (`s`)",
    );
    let fx = temp_file(
        "ops.fx",
        b"graph():
    %x : [num_users=1] = placeholder[target=x]
    %sum : [num_users=1] = call_function[target=torch.ops.aten.argmax.default](args = (%x,), kwargs = {})
    %f : [num_users=1] = call_function[target=torch.frob](args = (%sum,), kwargs = {})
    return f
",
    );
    assert_bad_input(
        &kiln(&["check", &fx, "--input", "x:f32[4, 3]"]),
        "`torch.frob` (%f); tensor ops `torch.ops.aten.argmax.default` (%sum)",
    );
    // The MLPs import now (tensor ops run on the interpreter); typed as a
    // column the fx one does not multiply, and says so.
    let out = kiln(&["check", &fixture("tf/mlp_frozen/graph.pbtxt")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let weights = fixture("fx/mlp_aten/weights.safetensors");
    let check_mlp = |ty: &str| {
        kiln(&[
            "check",
            &fixture("fx/mlp_aten/graph.txt"),
            "--weights",
            &weights,
            "--input",
            ty,
        ])
    };
    let out = check_mlp("arg0_1:f32[4, 3]");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_bad_input(&check_mlp("arg0_1:f32[n]"), "do not multiply");
    let garbage = temp_file("garbage.pb", b"\xff\xff\xff\xff\x0f");
    assert_bad_input(&kiln(&["check", &garbage]), "not a binary GraphDef");
    assert_bad_input(
        &kiln(&[
            "check",
            &fixture("fx/seed_scalar/graph.txt"),
            "--input",
            "x:f99",
        ]),
        "unknown dtype `f99`",
    );
}

#[test]
fn tf_split_outputs_by_name_on_every_tier() {
    // The README's layout example: `split:1` names Split's second output.
    let tiers: &[&str] = if cfg!(feature = "llvm") {
        &["interp", "vm", "cranelift", "llvm"]
    } else {
        &["interp", "vm", "cranelift"]
    };
    // The input as nested lists or flat (row-major); outputs as nested lists.
    for (tier, x) in tiers.iter().flat_map(|t| {
        [
            (t, "x=[[1, 2, 3, 4], [5, 6, 7, 8]]"),
            (t, "x=[1, 2, 3, 4, 5, 6, 7, 8]"),
        ]
    }) {
        let out = kiln(&[
            "run",
            &example("split.pbtxt"),
            "--arg",
            x,
            "--output",
            "cat",
            "--output",
            "split:1",
            "--output",
            "last",
            "--tier",
            tier,
        ]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "cat = [[3.0, 4.0, 1.0, 2.0], [7.0, 8.0, 5.0, 6.0]]\nsplit:1 = [[3.0, 4.0], [7.0, 8.0]]\nlast = [4.0, 8.0]\n",
            "{tier}"
        );
    }
    // JSON keeps the elements flat and gives the shape.
    let out = kiln(&[
        "run",
        &example("split.pbtxt"),
        "--arg",
        "x=[1, 2, 3, 4, 5, 6, 7, 8]",
        "--output",
        "split:1",
        "--json",
    ]);
    assert_eq!(
        stdout(&out),
        "[{\"data\":[3.0,4.0,7.0,8.0],\"dtype\":\"float32\",\"name\":\"split:1\",\"shape\":[2,2]}]\n"
    );
    // Nested lists that do not fit the input's shape.
    for (x, why) in [
        (
            "x=[[1, 2], [3, 4], [5, 6], [7, 8]]",
            "nested lists of shape [4, 2] do not fit f32[2, 4]",
        ),
        ("x=[[1, 2, 3, 4], [5, 6, 7]]", "(the lists are ragged)"),
        ("x=[[1, 2, 3, 4], [5, 6, 7, 8]", "unclosed `[`"),
    ] {
        let out = kiln(&["run", &example("split.pbtxt"), "--arg", x]);
        assert_eq!(out.status.code(), Some(2), "{x}");
        assert!(stderr(&out).contains(why), "{x}: {}", stderr(&out));
    }
    let out = kiln(&[
        "run",
        &example("split.pbtxt"),
        "--arg",
        "x=[1, 2, 3, 4, 5, 6, 7, 8]",
        "--output",
        "split:2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("reads output 2 of `split`, which has 2 output(s)"),
        "{}",
        stderr(&out)
    );
}

/// Rough edges a new user hits in the first minutes: expressions that start
/// with `-` or a space, NaN printed for people, on every tier.
#[test]
fn expressions_may_start_with_a_minus_or_a_space_and_nan_prints_plainly() {
    let csv = temp_file(
        "mom.csv",
        b"mom,B,theta\n2.0,3.0,0.0\n1.0,-1.0,3.141592653589793\n",
    );
    for &tier in tiers() {
        let out = kiln(&["run", "-e", "-x", "--arg", "x=2", "--tier", tier]);
        assert_eq!(
            (stdout(&out).as_str(), out.status.code()),
            ("out = -2.0\n", Some(0))
        );
        let out = kiln(&["run", "--expr", "  x * 2", "--arg", "x=2", "--tier", tier]);
        assert_eq!(stdout(&out), "out = 4.0\n", "{}", stderr(&out));
        let out = kiln(&[
            "eval",
            "-e",
            "-mom*B*cos(theta)",
            "--csv",
            &csv,
            "--tier",
            tier,
        ]);
        assert_eq!(stdout(&out), "out\n-6.0\n-1.0\n", "{}", stderr(&out));
        // A person reads `nan`, never its bits (x86's default NaN is negative).
        let out = kiln(&["run", "-e", "np.sqrt(-x)", "--arg", "x=2", "--tier", tier]);
        assert_eq!(stdout(&out), "out = nan\n", "{}", stderr(&out));
        let out = kiln(&[
            "run",
            "-e",
            "def f(x: float[n]): return np.sqrt(-x)",
            "--arg",
            "x=[2.0, -4.0]",
            "--tier",
            tier,
        ]);
        assert_eq!(stdout(&out), "out = [nan, 2.0]\n", "{}", stderr(&out));
        let out = kiln(&["eval", "-e", "sqrt(-mom)", "--csv", &csv, "--tier", tier]);
        assert_eq!(stdout(&out), "out\nnan\nnan\n", "{}", stderr(&out));
    }
    // Unknown functions name the nearest known one, located.
    let out = kiln(&["run", "-e", "arcsinhh(x)", "--arg", "x=1"]);
    assert_bad_input(&out, "did you mean `arcsinh`?");
}

/// Shapes come from the data: inputs given with values are typed with their
/// exact shapes where the graph leaves them open, and a TF placeholder's
/// fixed size stays fixed; every tier.
#[test]
fn shapes_come_from_the_data_given() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let linear = fixtures.join("fx/linear_module");
    let case = std::fs::read_to_string(linear.join("case.json")).expect("case.json");
    let case: serde_json::Value = serde_json::from_str(&case).expect("json");
    let inputs = temp_file("linear_inputs.json", case["inputs"].to_string().as_bytes());
    let graph = linear.join("graph.txt").display().to_string();
    let split = example("split_vector.pbtxt");
    // torch computed [1.4178504943847656, -1.234331727027893, -7.476794242858887].
    let expected = "add = [1.4178505, -1.2343317, -7.4767942]\n";
    for &tier in tiers() {
        // The README's line: --inputs alone (the weights are beside the graph).
        let out = kiln(&["run", &graph, "--inputs", &inputs, "--tier", tier]);
        assert_eq!(stdout(&out), expected, "{}", stderr(&out));
        // A TF Split of a fixed [4] placeholder.
        let out = kiln(&["run", &split, "--arg", "x=[1, 2, 3, 4]", "--tier", tier]);
        assert_eq!(stdout(&out), "sum = [7.0, 10.0]\n", "{}", stderr(&out));
        // An unannotated Python input given a nested list takes its shape.
        let out = kiln(&[
            "run",
            "-e",
            "x * 2",
            "--arg",
            "x=[[1, 2], [3, 4]]",
            "--tier",
            tier,
        ]);
        assert_eq!(
            stdout(&out),
            "out = [[2.0, 4.0], [6.0, 8.0]]\n",
            "{}",
            stderr(&out)
        );
    }
    // A symbolic length cannot meet the weight's fixed 4: the message says so
    // and how to fix it.
    let out = kiln(&[
        "run",
        &graph,
        "--inputs",
        &inputs,
        "--input",
        "input_1:f32[n]",
    ]);
    assert_bad_input(&out, "the symbolic dimension `n` meets the fixed 4");
    // As in TF, data that does not fit the declared [4] is refused.
    let out = kiln(&["run", &split, "--arg", "x=[1, 2, 3, 4, 5, 6]"]);
    assert_bad_input(&out, "input `x` has 6 rows, but dimension `4` is 4");
    let out = kiln(&["run", &split, "--arg", "x=[[1, 2], [3, 4]]"]);
    assert_bad_input(&out, "error: --arg x");
}

/// The CNNs written by real torch and TensorFlow (tests/fixtures): the
/// call_module form with its module tree and weights beside graph.txt, the
/// ATen form of a ResNet BasicBlock, and a frozen NHWC Keras-style CNN;
/// every tier prints the same values, each within 1e-6 of the output's
/// largest magnitude of what the library computed.
#[test]
fn cnns_from_torch_and_tensorflow_run_on_every_tier() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    for (case_name, file) in [
        ("fx/cnn_modules", "graph.txt"),
        ("fx/resblock_aten", "graph.txt"),
        ("tf/cnn_frozen", "graph.pbtxt"),
    ] {
        let dir = fixtures.join(case_name);
        let case = std::fs::read_to_string(dir.join("case.json")).expect("case.json");
        let case: serde_json::Value = serde_json::from_str(&case).expect("json");
        let graph = dir.join(file).display().to_string();
        for (run_idx, run) in case["runs"].as_array().expect("runs").iter().enumerate() {
            let inputs = temp_file(
                &format!("{}_{run_idx}.json", case_name.replace('/', "_")),
                run["inputs"].to_string().as_bytes(),
            );
            let want: Vec<f64> = run["outputs"][0]["data"]
                .as_array()
                .expect("data")
                .iter()
                .map(|v| v.as_f64().expect("a number"))
                .collect();
            let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
            let mut printed = Vec::new();
            for &tier in tiers() {
                let out = kiln(&["run", &graph, "--inputs", &inputs, "--tier", tier, "--json"]);
                let got: serde_json::Value = serde_json::from_str(&stdout(&out))
                    .unwrap_or_else(|_| panic!("{}", stderr(&out)));
                let got: Vec<f64> = got[0]["data"]
                    .as_array()
                    .expect("data")
                    .iter()
                    .map(|v| v.as_f64().expect("a number"))
                    .collect();
                assert_eq!(got.len(), want.len(), "{case_name} on {tier}");
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6 * scale,
                        "{case_name} run {run_idx} on {tier}: {g} vs {w}"
                    );
                }
                printed.push(stdout(&out));
            }
            assert!(
                printed.windows(2).all(|p| p[0] == p[1]),
                "{case_name}: the tiers differ"
            );
        }
    }
}

/// An nn.Sequential traced by real torch (tests/fixtures/fx_local): its
/// call_modules are typed by `print(gm)`, read as the source itself, as
/// `--modules FILE`, or from the module.txt beside graph.txt; every tier.
#[test]
fn sequential_models_from_print_gm() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/fx_local/seq_activations");
    let case = std::fs::read_to_string(dir.join("case.json")).expect("case.json");
    let case: serde_json::Value = serde_json::from_str(&case).expect("json");
    let inputs = temp_file("seq_inputs.json", case["inputs"].to_string().as_bytes());
    let module = dir.join("module.txt").display().to_string();
    let graph = dir.join("graph.txt").display().to_string();
    // Elsewhere, without the files beside it: --weights and --modules.
    let lone = temp_file("lone.fx", &std::fs::read(dir.join("graph.txt")).unwrap());
    let weights = dir.join("weights.safetensors").display().to_string();
    let first_row = "_8 = [[0.1887172, 0.27196822, 0.26083386, 0.27848074], ";
    for &tier in tiers() {
        for args in [
            vec!["run", &module, "--inputs", &inputs],
            vec!["run", &graph, "--inputs", &inputs],
            vec![
                "run",
                &lone,
                "--inputs",
                &inputs,
                "--weights",
                &weights,
                "--modules",
                &module,
            ],
        ] {
            let out = kiln(&[args.as_slice(), &["--tier", tier]].concat());
            assert!(
                stdout(&out).starts_with(first_row),
                "{args:?}: {}",
                stderr(&out)
            );
        }
    }
    // Without the module tree, the bare call_modules are reported together.
    let out = kiln(&["run", &lone, "--inputs", &inputs, "--weights", &weights]);
    assert_bad_input(&out, "call_module `1` (%_1), `3` (%_3), `4.1` (%_4_1)");
    assert!(stderr(&out).contains("--modules FILE"), "{}", stderr(&out));
    // A malformed tree is a located error in that file.
    let bad = temp_file("bad_module.txt", b"Sequential(\n  (0) Linear()\n)\n");
    let out = kiln(&["run", &lone, "--inputs", &inputs, "--modules", &bad]);
    assert_bad_input(&out, "bad_module.txt:2:3: error: expected `(name): Type(");
}

/// The LightGBM fixture (written by real lightgbm, `tests/fixtures/lightgbm`).
fn lightgbm_fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/lightgbm")
        .join(name)
        .display()
        .to_string()
}

/// The CSV's cells as doubles, with its header.
fn csv_floats(text: &str) -> (String, Vec<f64>) {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let cells = lines
        .flat_map(|l| l.split(','))
        .map(|c| c.parse::<f64>().expect("a number"))
        .collect();
    (header, cells)
}

#[test]
fn a_kiln_trees_model_over_a_csv() {
    // Two trees over features named with spaces; sums averaged, then the
    // sigmoid pair of scikit-learn's binary predict_proba.
    let model = "kiln-trees v0\ninput f32\nlink sigmoid-pair\naverage 2\n\
                 feature petal width\nfeature kind\n\
                 trees features 2 init [0.0] tree 0 [f0 le 0.5 nan left l0 l1] [1.0, -1.0] \
                 tree 0 [f1 le 2.0 nan right l0 l1] [0.5, 2.5]\n";
    let path = temp_file("model.trees", model.as_bytes());
    let rows = temp_file("rows.csv", b"petal width,kind\n0.25,1\n0.75,3\n");
    for tier in tiers() {
        let out = kiln(&["run", &path, "--csv", &rows, "--raw-score", "--tier", tier]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        // (1.0 + 0.5) and (-1.0 + 2.5): sums, not averaged, as raw scores.
        assert_eq!(stdout(&out), "prediction\n1.5\n1.5\n", "{tier}");
        let out = kiln(&["run", &path, "--csv", &rows, "--tier", tier]);
        let (header, got) = csv_floats(&stdout(&out));
        assert_eq!(header, "prediction_0,prediction_1");
        // kiln's exp is its own: within an ulp of the C library's.
        let p = 1.0 / (1.0 + (-0.75f64).exp());
        for (g, w) in got.iter().zip([1.0 - p, p, 1.0 - p, p]) {
            assert!((g - w).abs() <= 1e-15, "{tier}: {g} against {w}");
        }
        assert_eq!(got[0], 1.0 - got[1], "{tier}: 1 - p from kiln's p");
    }
    let bad = temp_file(
        "bad.trees",
        model.replace("link sigmoid-pair", "link tanh").as_bytes(),
    );
    assert_bad_input(&kiln(&["run", &bad, "--csv", &rows]), "unknown link");
}

#[test]
fn an_xgboost_model_over_a_csv_gives_xgboosts_predictions() {
    let fixture = |name: &str| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/xgboost");
        dir.join(name).display().to_string()
    };
    let (model, rows) = (fixture("model.json"), fixture("rows.csv"));
    let read = |name| std::fs::read_to_string(fixture(name)).expect("fixture");
    // float32 values, written as the doubles they widen to.
    let bits = |v: &[f64]| v.iter().map(|&x| (x as f32).to_bits()).collect::<Vec<_>>();
    let (want_header, want_margin) = csv_floats(&read("expected_margin.csv"));
    let (_, want) = csv_floats(&read("expected.csv"));
    for tier in tiers() {
        let out = kiln(&["run", &model, "--csv", &rows, "--raw-score", "--tier", tier]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        let (header, margin) = csv_floats(&stdout(&out));
        assert_eq!(header, want_header);
        assert_eq!(bits(&margin), bits(&want_margin), "{tier}: margins");
        let out = kiln(&["run", &model, "--csv", &rows, "--tier", tier]);
        let (_, got) = csv_floats(&stdout(&out));
        assert_eq!(got.len(), want.len(), "{tier}: {}", stderr(&out));
        for (g, w) in bits(&got).iter().zip(bits(&want)) {
            let ulps = (i64::from(*g) - i64::from(w)).abs();
            assert!(ulps <= 2, "{tier}: {g:#x} against XGBoost's {w:#x}");
        }
    }
    let text = read("model.json").replacen("binary:logistic", "binary:mystery", 1);
    let bad = temp_file("bad_model.json", text.as_bytes());
    assert_bad_input(&kiln(&["run", &bad, "--csv", &rows]), "unknown objective");
}

#[test]
fn a_lightgbm_model_over_a_csv_gives_lightgbms_predictions() {
    let model = lightgbm_fixture("model.txt");
    let rows = lightgbm_fixture("rows.csv");
    let read = |name| std::fs::read_to_string(lightgbm_fixture(name)).expect("fixture");
    let (want_header, want_raw) = csv_floats(&read("expected_raw.csv"));
    let (_, want) = csv_floats(&read("expected.csv"));
    for tier in tiers() {
        let out = kiln(&["run", &model, "--csv", &rows, "--raw-score", "--tier", tier]);
        assert_eq!(out.status.code(), Some(0), "{tier}: {}", stderr(&out));
        let (header, raw) = csv_floats(&stdout(&out));
        assert_eq!(header, want_header);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&raw), bits(&want_raw), "{tier}: raw scores");
        let out = kiln(&["eval", &model, "--csv", &rows, "--tier", tier]);
        let (_, got) = csv_floats(&stdout(&out));
        assert_eq!(got.len(), want.len(), "{tier}: {}", stderr(&out));
        for (g, w) in got.iter().zip(&want) {
            let ulps = (g.to_bits() as i64 - w.to_bits() as i64).abs();
            assert!(ulps <= 2, "{tier}: {g} against LightGBM's {w}");
        }
    }
    // A model is sniffed whatever its name; bad text is a located error.
    let text = read("model.txt").replacen("num_leaves=7", "num_leaves=x", 1);
    let bad = temp_file("bad_model.txt", text.as_bytes());
    assert_bad_input(&kiln(&["run", &bad, "--csv", &rows]), "bad_model.txt:");
    let missing = temp_file("short.csv", b"alpha,beta\n1,2\n");
    let out = kiln(&["run", &model, "--csv", &missing]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("gamma"), "{}", stderr(&out));
}
