//! Writes one seed per op conformance sample (a graph of the sample's inputs and its op) to
//! `corpus/text` and `corpus/json`, so every op's attributes start in the corpus; the README
//! adds the repo's `.rlx` golden files.
use rlx_ir::{Graph, Op};

fn main() -> std::io::Result<()> {
    let (text_dir, json_dir) = ("corpus/text", "corpus/json");
    std::fs::create_dir_all(text_dir)?;
    std::fs::create_dir_all(json_dir)?;
    let mut n = 0;
    for (i, s) in Op::all_samples().into_iter().enumerate() {
        let mut g = Graph::new(s.label.clone());
        let ins: Vec<_> =
            s.inputs.iter().enumerate().map(|(k, t)| g.input(&format!("x{k}"), t.shape.clone())).collect();
        let y = g.add_node(s.op.clone(), &ins);
        g.set_outputs(vec![y]);
        if g.verify().is_err() {
            continue;
        }
        std::fs::write(format!("{text_dir}/sample-{i:04}.rlx"), g.to_text())?;
        std::fs::write(format!("{json_dir}/sample-{i:04}.json"), g.to_json())?;
        n += 1;
    }
    println!("{n} samples written");
    Ok(())
}
