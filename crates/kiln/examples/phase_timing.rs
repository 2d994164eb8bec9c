use std::time::Instant;
fn main() {
    let text = std::fs::read_to_string("/work/shared/fixtures/gp/gp_population.txt").unwrap();
    let opts = kiln::PyOptions {
        default_shape: vec![kiln::Dim::Sym("n".into())],
        ..Default::default()
    };
    let t = Instant::now();
    let graphs: Vec<_> = text
        .lines()
        .map(|l| kiln::load(l, kiln::Format::Py, &opts).unwrap().graph)
        .collect();
    let t_parse = t.elapsed();
    let t = Instant::now();
    let infos: Vec<_> = graphs.iter().map(|g| kiln::verify(g).unwrap()).collect();
    let t_verify = t.elapsed();
    let t = Instant::now();
    let opt: Vec<_> = graphs
        .iter()
        .zip(&infos)
        .map(|(g, i)| kiln::optimize(g, i).unwrap())
        .collect();
    let t_opt = t.elapsed();
    let t = Instant::now();
    let kernels: Vec<_> = opt
        .iter()
        .map(|(g, i)| kiln::jit::lower(g, i).unwrap())
        .collect();
    let t_lower = t.elapsed();
    let t = Instant::now();
    let compiled = kiln::cranelift::jit(kernels).unwrap();
    let t_jit = t.elapsed();
    println!(
        "parse {:?} verify {:?} optimize {:?} lower {:?} jit {:?} ({} kernels)",
        t_parse,
        t_verify,
        t_opt,
        t_lower,
        t_jit,
        compiled.len()
    );
}
