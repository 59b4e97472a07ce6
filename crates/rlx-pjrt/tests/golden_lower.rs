//! The StableHLO text of small graphs, against committed files (`RLX_UPDATE_GOLDEN=1` rewrites
//! them): the module layout, argument order, the generic op syntax and the index checks. No
//! plugin needed.

use rlx_ir::{DType, Graph, Shape};
use std::path::PathBuf;

fn check(name: &str, g: &Graph) {
    let text = rlx_pjrt::lower::lower(g).expect("lower").text;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.mlir"));
    if std::env::var("RLX_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(text, want, "{name}: lowered text differs from {} (RLX_UPDATE_GOLDEN=1 rewrites it)", path.display());
}

#[test]
fn mlp_with_bias_and_gelu() {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let w = g.param("w", Shape::new(&[3, 4], DType::F32));
    let b = g.param("b", Shape::new(&[4], DType::F32));
    let h = g.matmul(x, w);
    let h = g.add(h, b);
    let y = g.relu(h);
    let s = g.sum(y, &[1], false);
    g.set_outputs(vec![y, s]);
    check("mlp", &g);
}

#[test]
fn embedding_lookup_with_its_index_check() {
    let mut g = Graph::new("embed");
    let t = g.param("table", Shape::new(&[5, 2], DType::F32));
    let i = g.input("ids", Shape::new(&[3], DType::I64));
    let r = g.gather(t, i, 0);
    g.set_outputs(vec![r]);
    check("embed", &g);
}
