//! State updates (`Graph::update_param`): counters, KV-cache writes in place, swaps, errors.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_runtime::Session;

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// The CPU, and wgpu / tpu / mlx where this build has them and they work here (an adapter, a
/// PJRT plugin, libmlx).
fn devices() -> Vec<Device> {
    rlx_runtime::register_backends();
    let mut d = vec![Device::Cpu];
    for other in [Device::Wgpu, Device::Tpu, Device::Mlx] {
        if other.is_available() {
            d.push(other);
        }
    }
    d
}

#[test]
fn a_counter_param_advances_every_run() {
    for device in devices() {
        let mut g = Graph::new("counter");
        let c = g.param("c", f32s(&[2]));
        let x = g.input("x", f32s(&[2]));
        let next = g.add(c, x);
        g.update_param(c, next);
        let doubled = g.add(c, c);
        g.set_outputs(vec![doubled]);
        let mut cg = Session::new(device).compile(g).unwrap();
        assert_eq!(cg.outputs().len(), 1);
        cg.set_param("c", &[1.0, -1.0]).unwrap();
        for step in 0..3 {
            let out = cg.run(&[("x", &[0.5, 2.0])]).unwrap();
            // The output reads the value before this run's update.
            let c0 = [1.0 + 0.5 * step as f32, -1.0 + 2.0 * step as f32];
            assert_eq!(out[0], vec![2.0 * c0[0], 2.0 * c0[1]]);
        }
        assert_eq!(cg.get_param("c").unwrap().to_f32_vec().unwrap(), vec![2.5, 5.0]);
    }
}

/// A cache written one row per run at a run-time position, like a KV cache in decode.
fn cache_graph(read_old_after: bool) -> Graph {
    let mut g = Graph::new("cache");
    let cache = g.param("cache", f32s(&[2, 5, 3]));
    let row = g.input("row", f32s(&[2, 1, 3]));
    let pos = g.input("pos", Shape::scalar(DType::I32));
    let new = g.dynamic_update_slice(cache, row, pos, 1);
    g.update_param(cache, new);
    let total = g.sum(new, &[0, 1, 2], false);
    let out = if read_old_after {
        // A later read of the old cache forbids the in-place write; the result must not change.
        let old = g.sum(cache, &[0, 1, 2], false);
        let o = g.sub(total, old);
        let dep = g.add(o, total);
        g.sub(dep, total)
    } else {
        total
    };
    g.set_outputs(vec![out]);
    g
}

#[test]
fn a_cache_fills_row_by_row() {
    for read_old_after in [false, true] {
        let mut cg = Session::new(Device::Cpu).compile(cache_graph(read_old_after)).unwrap();
        cg.set_param("cache", &[0.0; 30]).unwrap();
        let mut expected = vec![0.0f32; 30];
        let mut sum = 0.0;
        for p in 0..5usize {
            let row: Vec<f32> = (0..6).map(|k| (p * 10 + k) as f32).collect();
            for b in 0..2 {
                for k in 0..3 {
                    expected[b * 15 + p * 3 + k] = row[b * 3 + k];
                }
            }
            let pos = HostTensor::from_i64(&[], DType::I32, &[p as i64]).unwrap();
            let rowt = HostTensor::from_f32(&[2, 1, 3], &row).unwrap();
            let out = cg.run_tensors(&[("row", &rowt), ("pos", &pos)]).unwrap();
            let added: f32 = row.iter().sum();
            let want = if read_old_after { added } else { sum + added };
            sum += added;
            assert_eq!(out[0].to_f32_vec().unwrap(), vec![want], "read_old_after={read_old_after} pos={p}");
        }
        assert_eq!(cg.get_param("cache").unwrap().to_f32_vec().unwrap(), expected);
    }
}

#[test]
fn swapping_two_params_uses_the_old_values() {
    for device in devices() {
        let mut g = Graph::new("swap");
        let a = g.param("a", f32s(&[3]));
        let b = g.param("b", f32s(&[3]));
        g.update_param(a, b);
        g.update_param(b, a);
        let s = g.sub(a, b);
        g.set_outputs(vec![s]);
        let mut cg = Session::new(device).compile(g).unwrap();
        cg.set_param("a", &[1.0, 2.0, 3.0]).unwrap();
        cg.set_param("b", &[10.0, 20.0, 30.0]).unwrap();
        assert_eq!(cg.run(&[]).unwrap()[0], vec![-9.0, -18.0, -27.0]);
        assert_eq!(cg.run(&[]).unwrap()[0], vec![9.0, 18.0, 27.0]);
        assert_eq!(cg.get_param("a").unwrap().to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0]);
    }
}

#[test]
fn an_sgd_step_updates_in_the_arena() {
    for device in devices() {
        // p <- p - 0.5 * x * p, fused and written over p.
        let mut g = Graph::new("sgd");
        let p = g.param("p", f32s(&[4]));
        let x = g.input("x", f32s(&[4]));
        let xp = g.mul(x, p);
        let lr = g.scalar(0.5, DType::F32);
        let step = g.mul(xp, lr);
        let next = g.sub(p, step);
        g.update_param(p, next);
        let loss = g.sum(p, &[0], false);
        g.set_outputs(vec![loss]);
        let mut cg = Session::new(device).compile(g).unwrap();
        cg.set_param("p", &[1.0, 2.0, 4.0, 8.0]).unwrap();
        let x = [1.0, 0.5, 0.25, 0.0];
        let mut p = [1.0f32, 2.0, 4.0, 8.0];
        for _ in 0..4 {
            let out = cg.run(&[("x", &x)]).unwrap();
            assert_eq!(out[0], vec![p.iter().sum::<f32>()]);
            for k in 0..4 {
                p[k] -= 0.5 * x[k] * p[k];
            }
        }
        assert_eq!(cg.get_param("p").unwrap().to_f32_vec().unwrap(), p.to_vec());
    }
}

#[test]
fn bad_updates_are_errors_that_name_the_param() {
    let mut g = Graph::new("bad");
    let p = g.param("w", f32s(&[2]));
    let x = g.input("x", f32s(&[3]));
    g.update_param(p, x);
    g.set_outputs(vec![x]);
    let e = Session::new(Device::Cpu).compile(g).err().expect("mismatched update").to_string();
    assert!(e.contains("`w`") && e.contains("f32[2]") && e.contains("f32[3]"), "{e}");

    let mut g = Graph::new("not_param");
    let x = g.input("x", f32s(&[2]));
    let y = g.neg(x);
    g.update_param(x, y);
    g.set_outputs(vec![y]);
    let e = Session::new(Device::Cpu).compile(g).err().expect("input update").to_string();
    assert!(e.contains("not a param"), "{e}");

    let mut g = Graph::new("twice");
    let p = g.param("w", f32s(&[2]));
    let y = g.neg(p);
    g.update_param(p, y);
    g.update_param(p, p);
    g.set_outputs(vec![y]);
    let e = Session::new(Device::Cpu).compile(g).err().expect("two updates").to_string();
    assert!(e.contains("already has an update"), "{e}");

    let mut g = Graph::new("unset");
    let p = g.param("w", f32s(&[2]));
    g.set_outputs(vec![p]);
    let cg = Session::new(Device::Cpu).compile(g).unwrap();
    assert!(cg.get_param("w").is_err());
    assert!(cg.get_param("nope").unwrap_err().to_string().contains("nope"));
}

#[test]
fn updates_survive_the_text_form() {
    let g = cache_graph(false);
    let text = g.to_text();
    assert!(text.contains("update %0 <- %3"), "{text}");
    let back = Graph::from_text(&text).unwrap();
    assert_eq!(back.updates(), g.updates());
    let json = Graph::from_json(&g.to_json()).unwrap();
    assert_eq!(json.updates(), g.updates());
}
