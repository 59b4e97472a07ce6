//! rlx-splat against the numpy reference renderer (tools/splat_reference.py), its gradients
//! against central finite differences, the conformance suite, and its typed errors.

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Op, Result, Shape, testkit};
use rlx_splat::{Camera, Scene, SplatRender, register};
use serde_json::Value;

fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>> {
    rlx_driver::run_host(&CpuBackend::new(), g, feeds)
}

const NAMES: [&str; 5] = ["means", "log_scales", "quats", "opacity_logits", "colors"];
const COLS: [usize; 5] = [3, 3, 4, 0, 3];

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// The fixture's op and scene (five flat vectors).
fn fixture() -> (SplatRender, Vec<Vec<f64>>, Vec<f64>) {
    let f: Value = serde_json::from_str(include_str!("fixtures/splat.json")).unwrap();
    let camera: Camera = serde_json::from_value(f["camera"].clone()).unwrap();
    let bg = floats(&f["background"]);
    let op = SplatRender { camera, background: [bg[0], bg[1], bg[2]], tile_size: 16 };
    let scene = NAMES.iter().map(|n| floats(&f[*n])).collect();
    (op, scene, floats(&f["image"]))
}

fn scene(v: &[Vec<f64>]) -> Scene<'_> {
    Scene { means: &v[0], log_scales: &v[1], quats: &v[2], opacity_logits: &v[3], colors: &v[4] }
}

fn dims(n: usize, k: usize) -> Vec<usize> {
    if k == 0 { vec![n] } else { vec![n, k] }
}

/// A graph rendering the scene inputs, and its feeds.
fn render_graph(op: &SplatRender, v: &[Vec<f64>], dt: DType) -> (Graph, Vec<NodeId>, Vec<(String, HostTensor)>) {
    let n = v[3].len();
    let mut g = Graph::new("splat");
    let ins: Vec<NodeId> = NAMES.iter().zip(COLS).map(|(name, k)| g.input(name, Shape::new(&dims(n, k), dt))).collect();
    let img = rlx_splat::splat_render(&mut g, op.clone(), &ins);
    g.set_outputs(vec![img]);
    let feeds = NAMES
        .iter()
        .zip(COLS)
        .zip(v)
        .map(|((name, k), x)| (name.to_string(), HostTensor::from_f64(&dims(n, k), dt, x).unwrap()))
        .collect();
    (g, ins, feeds)
}

fn feeds_of(list: &[(String, HostTensor)]) -> Vec<(&str, HostTensor)> {
    list.iter().map(|(n, t)| (n.as_str(), t.clone())).collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn forward_matches_the_numpy_reference() {
    register().unwrap();
    let (op, v, want) = fixture();
    // The fixture covers a good part of the image, so the comparison is not against background.
    let bg_pixels = want.chunks(3).filter(|c| (0..3).all(|i| (c[i] - op.background[i]).abs() < 1e-6)).count();
    assert!(bg_pixels < want.len() / 3 * 3 / 4, "{bg_pixels} background pixels");
    for (dt, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-10)] {
        let (g, _, feeds) = render_graph(&op, &v, dt);
        let got = run(&g, &feeds_of(&feeds)).unwrap()[0].to_f64_vec().unwrap();
        let err = max_abs_diff(&got, &want);
        println!("{dt}: max |cpu - numpy| = {err:e}");
        assert!(err <= tol, "{dt}: {err}");
        // The reference interpreter (untiled) agrees too.
        let r = rlx_ir::interp::evaluate(&g, &feeds_of(&feeds)).unwrap()[0].to_f64_vec().unwrap();
        assert!(max_abs_diff(&r, &want) <= tol, "{dt} interp");
    }
    // Tile size changes nothing but speed.
    for ts in [1, 5, 64, 100] {
        let o = SplatRender { tile_size: ts, ..op.clone() };
        let img = rlx_splat::render(&o, &scene(&v), true).unwrap();
        assert!(max_abs_diff(&img, &want) <= 1e-10, "tile {ts}");
    }
}

#[test]
fn ops_pass_the_conformance_suite() {
    register().unwrap();
    let report = testkit::run_conformance(run);
    let n = report.passed.iter().filter(|l| l.starts_with("splat_render")).count();
    assert_eq!(n, 3, "our samples ran: {:?}", report.failed);
    report.assert_all_pass();
    assert!(Op::all_samples().iter().any(|s| s.label.starts_with("splat_render_grad/")));
}

#[test]
fn text_and_json_round_trip() {
    register().unwrap();
    let (op, v, _) = fixture();
    let (g, _, _) = render_graph(&op, &v, DType::F32);
    let text = g.to_text();
    assert!(text.contains("splat_render(") && text.contains("\"tile_size\":16"), "{text}");
    assert_eq!(Graph::from_text(&text).unwrap(), g);
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
}

/// `sum(w * render(scene))` in f64, for finite differences.
fn weighted(op: &SplatRender, v: &[Vec<f64>], w: &[f64]) -> f64 {
    rlx_splat::render(op, &scene(v), true).unwrap().iter().zip(w).map(|(a, b)| a * b).sum()
}

#[test]
fn gradients_match_central_finite_differences_for_every_input() {
    register().unwrap();
    let (op, v, _) = fixture();
    let (mut g, ins, feeds) = render_graph(&op, &v, DType::F64);
    let img = g.outputs()[0];
    let npix = op.camera.width * op.camera.height * 3;
    let w = rlx_ir::ops::util::rand_f64(npix, -1.0, 1.0, 5);
    let wn = g.constant(HostTensor::from_f64(&[op.camera.height, op.camera.width, 3], DType::F64, &w).unwrap());
    let p = g.mul(img, wn);
    let l = g.sum_all(p);
    g.set_outputs(vec![l]);
    let gg = rlx_autodiff::grad(&g, &ins).unwrap();
    let grads: Vec<Vec<f64>> = run(&gg, &feeds_of(&feeds)).unwrap().iter().map(|t| t.to_f64_vec().unwrap()).collect();
    // The interpreter (the untiled serial backward) gives the same gradients.
    let interp = rlx_ir::interp::evaluate(&gg, &feeds_of(&feeds)).unwrap();
    // f64 throughout: h = 1e-6 leaves truncation (h^2) and rounding (1e-16 / h) errors near
    // 1e-10; the tolerance leaves room for the loss's size (sums over 12288 pixels).
    let h = 1e-6;
    for (k, name) in NAMES.iter().enumerate() {
        let i = interp[k].to_f64_vec().unwrap();
        assert!(max_abs_diff(&grads[k], &i) <= 1e-9, "{name}: tiled vs untiled backward");
        let mut worst = 0.0f64;
        for j in 0..v[k].len() {
            let mut vp = v.to_vec();
            vp[k][j] += h;
            let mut vm = v.to_vec();
            vm[k][j] -= h;
            let fd = (weighted(&op, &vp, &w) - weighted(&op, &vm, &w)) / (2.0 * h);
            let err = (grads[k][j] - fd).abs() / fd.abs().max(1.0);
            assert!(err <= 1e-5, "{name}[{j}]: grad {} vs finite difference {fd}", grads[k][j]);
            worst = worst.max(err);
        }
        let norm = grads[k].iter().map(|x| x * x).sum::<f64>().sqrt();
        println!("{name}: |grad| = {norm:.4}, worst relative error vs finite differences {worst:.2e}");
        assert!(norm > 1e-3, "{name}: the gradient is not trivially zero");
    }
}

#[test]
fn bad_shapes_and_attributes_are_typed_errors() {
    register().unwrap();
    let (op, v, _) = fixture();
    let n = v[3].len();
    // quaternions with 3 columns: the graph records an error naming the op and the input.
    let mut g = Graph::new("bad");
    let ins: Vec<NodeId> =
        NAMES.iter().zip([3, 3, 3, 0, 3]).map(|(name, k)| g.input(name, Shape::new(&dims(n, k), DType::F32))).collect();
    rlx_splat::splat_render(&mut g, op.clone(), &ins);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("splat_render") && e.contains("quats must be f32[20,4]"), "{e}");
    // Mixed dtypes.
    let mut g = Graph::new("mixed");
    let ins: Vec<NodeId> = NAMES
        .iter()
        .zip(COLS)
        .enumerate()
        .map(|(i, (name, k))| g.input(name, Shape::new(&dims(n, k), if i == 4 { DType::F64 } else { DType::F32 })))
        .collect();
    rlx_splat::splat_render(&mut g, op.clone(), &ins);
    assert!(g.check().unwrap_err().to_string().contains("colors must be f32"));
    // Attributes.
    for (bad, what) in [
        (SplatRender { tile_size: 0, ..op.clone() }, "tile_size"),
        (SplatRender { camera: Camera { width: 0, ..op.camera.clone() }, ..op.clone() }, "non-empty"),
        (SplatRender { camera: Camera { near: -1.0, ..op.camera.clone() }, ..op.clone() }, "near"),
        (SplatRender { camera: Camera { fx: 0.0, ..op.camera.clone() }, ..op.clone() }, "focal"),
    ] {
        let e = bad.validate().unwrap_err();
        assert!(matches!(e, rlx_splat::SplatError::Attr { .. }), "{e}");
        assert!(e.to_string().contains(what), "{e}");
        let (g, _, _) = render_graph(&bad, &v, DType::F32);
        let ge = g.check().unwrap_err().to_string();
        assert!(ge.contains("splat_render") && ge.contains(what), "{ge}");
    }
    // Values: a zero quaternion and a NaN mean, through the kernel and the direct call.
    let mut z = v.clone();
    z[2][4..8].copy_from_slice(&[0.0; 4]);
    let (g, _, feeds) = render_graph(&op, &z, DType::F32);
    let e = run(&g, &feeds_of(&feeds)).unwrap_err().to_string();
    assert!(e.contains("splat_render") && e.contains("quats") && e.contains("Gaussian 1: has zero norm"), "{e}");
    let mut nan = v.clone();
    nan[0][0] = f64::NAN;
    let e = rlx_splat::render(&op, &scene(&nan), true).unwrap_err();
    assert!(matches!(&e, rlx_splat::SplatError::Value { input, .. } if input == "means"), "{e}");
    // Slices that disagree on N.
    let mut short = v.clone();
    short[4].pop();
    let e = rlx_splat::render(&op, &scene(&short), true).unwrap_err();
    assert!(matches!(&e, rlx_splat::SplatError::Shape { input, .. } if input == "colors"), "{e}");
    let e = rlx_splat::backward(&op, &scene(&v), &[0.0; 5], true).unwrap_err();
    assert!(e.to_string().contains("splat_render_grad: cotangent"), "{e}");
}

#[test]
fn vmap_matches_a_loop() {
    register().unwrap();
    // No batching rule: vmap unrolls the op over the batch, which must agree with a loop.
    let samples: Vec<_> = Op::all_samples().into_iter().filter(|s| s.label.starts_with("splat_render")).collect();
    assert_eq!(samples.len(), 3);
    for s in &samples {
        for p in rlx_autodiff::check::vmap_patterns(s.inputs.len()) {
            rlx_autodiff::check::vmap_against_loop(s, &p, Some(&run)).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        }
    }
}
