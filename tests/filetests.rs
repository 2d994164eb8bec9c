//! Runs every filetest under `tests/filetests/` on every engine this build has.
//! Set `KILN_BLESS=1` to rewrite the expected optimized graphs of `opt/` files.

use kiln_tests::{load, run_all};
use std::path::{Path, PathBuf};

const OPT_MARKER: &str = "# optimized:";

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("filetests directory")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("kiln" | "py")
        ) {
            out.push(path);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests")
}

#[test]
fn every_filetest_on_every_engine() {
    let mut paths = Vec::new();
    files(&root(), &mut paths);
    assert!(paths.len() >= 10, "found only {} filetests", paths.len());
    #[allow(unused_mut)]
    let mut engines = kiln::engines();
    // The LLVM tier's wasm32 modules, under a wasm interpreter.
    #[cfg(feature = "llvm")]
    engines.push(Box::new(kiln_tests::wasm::Wasm));
    let mut failures = Vec::new();
    let mut n_runs = 0;
    for path in &paths {
        match load(path) {
            Ok(test) => {
                if test.runs.is_empty() && !path.starts_with(root().join("opt")) {
                    failures.push(format!("{}: no `# run:` lines", path.display()));
                }
                n_runs += test.runs.len();
                failures.extend(run_all(path, &test, &engines));
            }
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(kiln::threads::chunked_runs() > 0, "no kernel ran in chunks");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} filetests, {n_runs} run lines, {} engine(s)",
        paths.len(),
        engines.len()
    );
}

/// `opt/` files carry the expected `kiln ir --opt` output after `# optimized:`.
#[test]
fn optimized_graphs_match_expectations() {
    let mut paths = Vec::new();
    files(&root().join("opt"), &mut paths);
    let bless = std::env::var_os("KILN_BLESS").is_some();
    let mut failures = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("readable");
        let test = load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let verified =
            kiln::verify(test.graph.clone()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let optimized = kiln::optimize(&verified).expect("optimizes");
        let expected: String = kiln::ir::text::print(optimized.graph())
            .lines()
            .map(|l| format!("# {l}\n"))
            .collect();
        let head = text
            .split(OPT_MARKER)
            .next()
            .expect("split yields one part")
            .trim_end();
        let want = format!("{head}\n{OPT_MARKER}\n{expected}");
        if text != want {
            if bless {
                std::fs::write(&path, want).expect("writable");
            } else {
                failures.push(format!("{}: optimized graph differs; rerun with KILN_BLESS=1 and review the diff. Got:\n{expected}", path.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
