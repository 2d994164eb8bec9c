//! The `aot` binary end to end: the tutorials' objects linked with a C `main`
//! and run, what LLVM's optimizer makes of them, wasm modules, C headers, and
//! bad requests (exit 2 with a clear message, never a panic).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn aot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aot"))
        .args(args)
        .output()
        .expect("aot runs")
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

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-aot-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    stdout(out)
}

/// Asserts exit 2 with `error:` and `message` on stderr, and no panic.
fn assert_refused(out: &Output, message: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("error") && err.contains(message), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Compiles `main.c` with `object` in `dir` and runs the program.
fn link_and_run(dir: &Path, object: &str) -> String {
    let exe = dir.join("main");
    let cc = Command::new("cc")
        .current_dir(dir)
        .args([
            "-std=c11", "-Wall", "-Werror", "main.c", object, "-lm", "-o",
        ])
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().expect("the program runs");
    assert!(run.status.success());
    String::from_utf8_lossy(&run.stdout).into_owned()
}

/// The torch.fx tutorial: `forward(2.0) = 4.00`, from an object linked with a
/// C `main` as the tutorial does with `clang forward.o main.o`.
fn tutorial_object_links_and_runs(tier: &str) {
    let dir = temp_dir(tier);
    let object = dir.join("forward.o").display().to_string();
    let header = dir.join("forward.h").display().to_string();
    let fn_py = example("fn.py");
    let common = ["--name", "forward", "--tier", tier];
    ok(&aot(&[&fn_py, "--emit", "obj", "-O", "3", "-o", &object]
        .into_iter()
        .chain(common)
        .collect::<Vec<_>>()));
    ok(&aot(&[&fn_py, "--emit", "header", "-o", &header]
        .into_iter()
        .chain(common)
        .collect::<Vec<_>>()));
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\n#include \"forward.h\"\n\
         int main(void) { printf(\"forward(2.0) = %.2f\\n\", forward(2.0)); return 0; }\n",
    )
    .expect("write main.c");
    assert_eq!(link_and_run(&dir, "forward.o"), "forward(2.0) = 4.00\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `aot -e` takes an expression that starts with `-`; the new math ops are
/// C calls in the object (`asinh`, `nextafter`), linked with the platform
/// libm, on every tier this build has.
#[test]
fn leading_minus_and_the_new_math_in_an_object() {
    let tiers: &[&str] = if cfg!(feature = "llvm") {
        &["cranelift", "llvm"]
    } else {
        &["cranelift"]
    };
    for tier in tiers {
        let dir = temp_dir(&format!("minus-{tier}"));
        let object = dir.join("f.o").display().to_string();
        let header = dir.join("f.h").display().to_string();
        let src = "-np.arcsinh(x) + np.nextafter(1.0, 2.0)";
        for (emit, out) in [("obj", &object), ("header", &header)] {
            ok(&aot(&[
                "-e", src, "--name", "f", "--tier", tier, "--emit", emit, "-o", out,
            ]));
        }
        std::fs::write(
            dir.join("main.c"),
            "#include <stdio.h>\n#include \"f.h\"\n\
             int main(void) { printf(\"%.17g\\n\", f(1.0)); return 0; }\n",
        )
        .expect("write main.c");
        // -asinh(1) + (1 + 2^-52), asinh from the platform libm (as Python computes it)
        assert_eq!(link_and_run(&dir, "f.o"), "0.11862641298045717\n", "{tier}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn cranelift_tutorial_object_links_and_runs() {
    tutorial_object_links_and_runs("cranelift");
}

#[test]
fn headers_need_no_tier() {
    let out = ok(&aot(&[
        &example("nnc.py"),
        "--emit",
        "header",
        "--name",
        "nnc",
    ]));
    assert!(
        out.contains("int32_t nnc(const double* x_0, int64_t n_1, double* out_out_2);"),
        "{out}"
    );
    // Every array parameter's shape, symbolic dims by their extent's name.
    assert!(
        out.contains("/* Arrays:\n   x_0: f64[n]\n   out_out_2: f64[n] */\n"),
        "{out}"
    );
    let out = ok(&aot(&[
        &example("split.pbtxt"),
        "--emit",
        "header",
        "--name",
        "layout",
    ]));
    assert!(out.contains("   x_0: f32[2, 4]\n"), "{out}");
    assert!(out.contains("   out_cat_"), "{out}");
    assert!(out.contains(": f32[3, 2, 4]"), "{out}");
    // A direct scalar signature has no arrays.
    let out = ok(&aot(&[&example("fn.py"), "--emit", "header"]));
    assert!(!out.contains("Arrays"), "{out}");
}

#[test]
fn bad_requests_exit_2() {
    let fn_py = example("fn.py");
    assert_refused(&aot(&[&fn_py, "--emit", "obj", "-O", "7"]), "0..=3");
    assert_refused(&aot(&[&fn_py, "--emit", "exe"]), "invalid value 'exe'");
    assert_refused(&aot(&[&fn_py]), "--emit");
    assert_refused(
        &aot(&[&fn_py, "--emit", "header", "--name", "not a symbol"]),
        "not a C identifier",
    );
    assert_refused(&aot(&["--emit", "header", "-e", "x +"]), "<expr>:1:");
    let wasm_on_cranelift = aot(&[
        &fn_py,
        "--emit",
        "obj",
        "--tier",
        "cranelift",
        "--target",
        "wasm32",
        "-o",
        "/dev/null",
    ]);
    assert_refused(&wasm_on_cranelift, "`wasm32`");
    assert_refused(&wasm_on_cranelift, "need the LLVM tier");
    assert_refused(
        &aot(&[&fn_py, "--emit", "asm", "--tier", "cranelift"]),
        "`asm` needs the LLVM tier",
    );
    assert_refused(
        &aot(&[&fn_py, "--emit", "header", "--tier", "interp"]),
        "interp",
    );
    assert_refused(
        &aot(&["/nonexistent/graph.py", "--emit", "header"]),
        "cannot read",
    );
}

#[cfg(not(feature = "llvm"))]
#[test]
fn llvm_requests_without_the_feature_name_it() {
    let fn_py = example("fn.py");
    assert_refused(
        &aot(&[&fn_py, "--emit", "obj", "--tier", "llvm", "-o", "/dev/null"]),
        "--features llvm",
    );
    // The default tier without LLVM is Cranelift, which has no assembly.
    assert_refused(&aot(&[&fn_py, "--emit", "asm"]), "--features llvm");
    assert_refused(
        &aot(&[
            &fn_py,
            "--emit",
            "wasm",
            "--target",
            "wasm32",
            "-o",
            "/dev/null",
        ]),
        "--features llvm",
    );
}

#[cfg(feature = "llvm")]
mod llvm {
    use super::*;

    #[test]
    fn llvm_tutorial_object_links_and_runs() {
        tutorial_object_links_and_runs("llvm");
    }

    /// LLVM removes the tutorial's dead code by itself: even without kiln's
    /// graph passes, the O3 IR has one `fadd` and nothing else computing.
    #[test]
    fn o3_leaves_one_fadd_in_the_tutorial_function() {
        for extra in [&[][..], &["--no-opt"][..]] {
            let mut args = vec![example("fn.py")];
            args.extend(["--emit", "llvm-ir", "-O", "3"].map(String::from));
            args.extend(extra.iter().map(|s| s.to_string()));
            let ir = ok(&aot(&args.iter().map(String::as_str).collect::<Vec<_>>()));
            let body: Vec<&str> = ir
                .lines()
                .skip_while(|l| !l.starts_with("define"))
                .take_while(|l| *l != "}")
                .filter(|l| l.contains(" = "))
                .collect();
            assert_eq!(body.len(), 1, "{ir}");
            assert!(body[0].contains("fadd double %x, 2.0"), "{ir}");
        }
    }

    /// The TensorFlow tutorial's `((input - 2) + 5) + 100` on i32: one add of
    /// 103 (wrapping, as TF's int32 does).
    #[test]
    fn o3_folds_the_tensorflow_tutorial_to_one_add() {
        let src = "def f(input: i32): return ((input - 2) + 5) + 100";
        let ir = ok(&aot(&["-e", src, "--no-opt", "--emit", "llvm-ir"]));
        let body: Vec<&str> = ir
            .lines()
            .skip_while(|l| !l.starts_with("define"))
            .take_while(|l| *l != "}")
            .filter(|l| l.contains(" = "))
            .collect();
        assert_eq!(body.len(), 1, "{ir}");
        assert!(body[0].contains("add i32 %input, 103"), "{ir}");
    }

    /// LLVM would fold `nextafter(1.0, 2.0)` with the compiler's own libm;
    /// kiln's math calls are `nobuiltin`, so the call stays and the library
    /// decides (the `libm` crate in process, as in the interpreter). (Inline
    /// math, every transcendental, is plain arithmetic, which LLVM folds
    /// exactly.)
    #[test]
    fn math_calls_survive_o3() {
        let ir = ok(&aot(&[
            "-e",
            "nextafter(1.0, 2.0) * x + nextafter(x, 0.0)",
            "--no-opt",
            "--emit",
            "llvm-ir",
        ]));
        for call in [
            "call double @nextafter(double 1.0",
            "call double @nextafter(double %x, double 0.0",
        ] {
            assert!(ir.contains(call), "{call}:\n{ir}");
        }
    }

    #[test]
    fn assembly_for_every_short_target_and_a_full_triple() {
        let nnc = example("nnc.py");
        for (target, instruction) in [
            ("x86_64", "mul"),
            ("aarch64", "fmul"),
            ("riscv64", "fmul.d"),
            ("wasm32", "f64.mul"),
            ("armv7-unknown-linux-gnueabihf", "vmul.f64"),
        ] {
            let asm = ok(&aot(&[&nnc, "--target", target, "--emit", "asm"]));
            assert!(asm.contains(instruction), "{target}:\n{asm}");
            assert!(asm.contains("nnc"), "{target}:\n{asm}");
        }
    }

    #[test]
    fn bitcode_and_objects_have_their_magic() {
        let dir = temp_dir("magic");
        let fn_py = example("fn.py");
        for (emit, target, magic) in [
            ("bc", "x86_64", &b"BC\xc0\xde"[..]),
            ("obj", "aarch64", &b"\x7fELF"[..]),
            ("obj", "wasm32", &b"\0asm"[..]),
            ("wasm", "wasm32", &b"\0asm"[..]),
        ] {
            let out = dir.join(format!("out-{emit}-{target}"));
            let path = out.display().to_string();
            ok(&aot(&[
                &fn_py, "--emit", emit, "--target", target, "-o", &path,
            ]));
            let bytes = std::fs::read(&out).expect("written");
            assert!(bytes.starts_with(magic), "{emit} {target}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpu_and_features_reach_the_code_generator() {
        let nnc = example("nnc.py");
        let plain = ok(&aot(&[
            &nnc, "--target", "x86_64", "--cpu", "x86-64", "--emit", "asm",
        ]));
        let avx = ok(&aot(&[
            &nnc,
            "--target",
            "x86_64",
            "--cpu",
            "x86-64",
            "--features",
            "+avx",
            "--emit",
            "asm",
        ]));
        assert!(!plain.contains("vmulsd"), "{plain}");
        assert!(avx.contains("vmulsd"), "{avx}");
        // `native` is the host's CPU; a name LLVM does not know is its
        // warning and the generic CPU, never an abort of the process (it
        // aborted: "64-bit code requested on a subtarget that doesn't
        // support it").
        ok(&aot(&[&nnc, "--cpu", "native", "--emit", "asm"]));
        for target in ["x86_64", "aarch64", "riscv64", "wasm32"] {
            let out = aot(&[&nnc, "--target", target, "--cpu", "wobble", "--emit", "asm"]);
            assert!(out.status.success(), "{target}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("not a recognized processor"),
                "{}",
                stderr(&out)
            );
        }
        assert_refused(
            &aot(&[
                &nnc, "--target", "aarch64", "--cpu", "native", "--emit", "asm",
            ]),
            "is the host's",
        );
    }

    #[test]
    fn llvm_bad_requests_exit_2() {
        let fn_py = example("fn.py");
        assert_refused(
            &aot(&[
                &fn_py,
                "--emit",
                "obj",
                "--target",
                "bogus-arch",
                "-o",
                "/dev/null",
            ]),
            "unknown target `bogus-arch`",
        );
        assert_refused(
            &aot(&[
                &fn_py,
                "--emit",
                "wasm",
                "--target",
                "x86_64",
                "-o",
                "/dev/null",
            ]),
            "needs a wasm32 target",
        );
    }
}
