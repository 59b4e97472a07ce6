//! The core contract every device backend keeps, checked against the CPU backend: an MLP with
//! softmax, f64 gradients to 1e-12, attention and norms, bad inputs as errors, state updates and
//! shared params. Each device's test file (`tpu.rs`, `mlx.rs`) calls these with its device.
#![allow(dead_code)]

use rlx::prelude::*;

/// Runs `g` on both devices with the same params and inputs; returns (cpu, dev) outputs.
fn both(
    device: Device,
    g: &Graph,
    params: &[(&str, HostTensor)],
    inputs: &[(&str, HostTensor)],
) -> Result<Vec<(HostTensor, HostTensor)>> {
    let mut outs = vec![];
    for d in [Device::Cpu, device] {
        let mut c = Session::new(d).compile(g.clone())?;
        for (n, t) in params {
            c.set_param_tensor(n, t)?;
        }
        let feeds: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        outs.push(c.run_tensors(&feeds)?);
    }
    let dev = outs.pop().unwrap_or_default();
    Ok(outs.pop().unwrap_or_default().into_iter().zip(dev).collect())
}

fn max_diff(a: &HostTensor, b: &HostTensor) -> f64 {
    let (x, y) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    assert_eq!(x.len(), y.len());
    x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max)
}

fn rand(d: &[usize], dt: DType, seed: u64) -> HostTensor {
    let n: usize = d.iter().product();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    HostTensor::from_f64(d, dt, &v).unwrap()
}

pub fn quickstart_mlp_matches_the_cpu(device: Device) -> Result<()> {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[4, 8], DType::F32));
    let w1 = g.param("w1", Shape::new(&[8, 16], DType::F32));
    let b1 = g.param("b1", Shape::new(&[16], DType::F32));
    let w2 = g.param("w2", Shape::new(&[16, 3], DType::F32));
    let h = g.matmul(x, w1);
    let h = g.add(h, b1);
    let h = g.gelu(h);
    let y = g.matmul(h, w2);
    let y = g.softmax(y, -1);
    g.set_outputs(vec![y]);

    let params = [
        ("w1", rand(&[8, 16], DType::F32, 1)),
        ("b1", rand(&[16], DType::F32, 2)),
        ("w2", rand(&[16, 3], DType::F32, 3)),
    ];
    for (cpu, dev) in both(device, &g, &params, &[("x", rand(&[4, 8], DType::F32, 4))])? {
        assert!(max_diff(&cpu, &dev) < 1e-5, "{cpu:?} vs {dev:?}");
    }
    Ok(())
}

pub fn f64_mlp_gradients_match_the_cpu_to_1e_12(device: Device) -> Result<()> {
    let f64s = |d: &[usize]| Shape::new(d, DType::F64);
    let mut g = Graph::new("mlp64");
    let x = g.input("x", f64s(&[5, 6]));
    let w1 = g.param("w1", f64s(&[6, 7]));
    let w2 = g.param("w2", f64s(&[7, 2]));
    let h = g.matmul(x, w1);
    let h = g.tanh(h);
    let y = g.matmul(h, w2);
    let sq = g.mul(y, y);
    let loss = g.mean(sq, &[0, 1], false);
    g.set_outputs(vec![loss]);
    let gg = grad_with_loss(&g, &[w1, w2])?;
    let params = [("w1", rand(&[6, 7], DType::F64, 5)), ("w2", rand(&[7, 2], DType::F64, 6))];
    let outs = both(device, &gg, &params, &[("x", rand(&[5, 6], DType::F64, 7))])?;
    assert_eq!(outs.len(), 3);
    for (cpu, dev) in &outs {
        let d = max_diff(cpu, dev);
        assert!(d <= 1e-12, "gradient differs by {d}");
    }
    Ok(())
}

pub fn causal_attention_and_norms_match_the_cpu(device: Device) -> Result<()> {
    let s = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("block");
    let x = g.input("x", s(&[2, 5, 16]));
    let gamma = g.param("gamma", s(&[16]));
    let beta = g.param("beta", s(&[16]));
    let n = g.layer_norm(x, gamma, beta, 1e-5);
    let r = g.rms_norm(n, gamma, 1e-6);
    let q = g.reshape(r, &[2, 5, 2, 8]);
    let q = g.transpose(q, &[0, 2, 1, 3]);
    let a = g.attention(q, q, q, MaskKind::Causal, 0.35);
    let b = g.broadcast_to(beta, &[2, 2, 5, 16]);
    let a = g.reshape(a, &[2, 2, 5, 8]);
    let a = g.concat(&[a, a], -1);
    let y = g.add(a, b);
    g.set_outputs(vec![y]);
    let params = [("gamma", rand(&[16], DType::F32, 8)), ("beta", rand(&[16], DType::F32, 9))];
    for (cpu, dev) in both(device, &g, &params, &[("x", rand(&[2, 5, 16], DType::F32, 10))])? {
        assert!(max_diff(&cpu, &dev) < 1e-5);
    }
    Ok(())
}

pub fn bad_inputs_are_errors(device: Device) -> Result<()> {
    let mut g = Graph::new("take");
    let table = g.param("table", Shape::new(&[4, 3], DType::F32));
    let idx = g.input("idx", Shape::new(&[2], DType::I64));
    let rows = g.gather(table, idx, 0);
    g.set_outputs(vec![rows]);
    let mut c = Session::new(device).compile(g)?;
    // A param never set.
    let ids = HostTensor::from_i64(&[2], DType::I64, &[0, 3])?;
    let e = c.run_tensors(&[("idx", &ids)]).unwrap_err().to_string();
    assert!(e.contains("table"), "{e}");
    c.set_param("table", &[0.0; 12])?;
    // The wrong length.
    let e = c.run(&[("idx", &[1.0])]).unwrap_err().to_string();
    assert!(e.contains("idx"), "{e}");
    // An index XLA would clamp is an error, as on the CPU.
    let far = HostTensor::from_i64(&[2], DType::I64, &[0, 9])?;
    let e = c.run_tensors(&[("idx", &far)]).unwrap_err().to_string();
    assert!(e.contains("outside 0..4"), "{e}");
    assert_eq!(c.run_tensors(&[("idx", &ids)])?.len(), 1);
    Ok(())
}

pub fn state_updates_stay_on_the_device(device: Device) -> Result<()> {
    let mut g = Graph::new("counter");
    let c = g.param("c", Shape::new(&[2], DType::F32));
    let x = g.input("x", Shape::new(&[2], DType::F32));
    let next = g.add(c, x);
    g.update_param(c, next);
    let doubled = g.add(c, c);
    g.set_outputs(vec![doubled]);
    let mut cg = Session::new(device).compile(g)?;
    cg.set_param("c", &[1.0, -1.0])?;
    for step in 0..3 {
        let out = cg.run(&[("x", &[0.5, 2.0])])?;
        let c0 = [1.0 + 0.5 * step as f32, -1.0 + 2.0 * step as f32];
        assert_eq!(out[0], vec![2.0 * c0[0], 2.0 * c0[1]]);
    }
    assert_eq!(cg.get_param("c")?.to_f32_vec()?, vec![2.5, 5.0]);
    Ok(())
}

pub fn shared_params_see_each_others_updates(device: Device) -> Result<()> {
    let s = Shape::new(&[3], DType::F32);
    let mut step = Graph::new("step");
    let w = step.param("w", s.clone());
    let x = step.input("x", s.clone());
    let next = step.add(w, x);
    step.update_param(w, next);
    step.set_outputs(vec![next]);
    let mut read = Graph::new("read");
    let w2 = read.param("w", s.clone());
    let y = read.mul(w2, w2);
    read.set_outputs(vec![y]);
    let session = Session::new(device);
    let mut a = session.compile(step)?;
    let mut b = session.compile(read)?;
    a.set_param("w", &[1.0, 2.0, 3.0])?;
    b.share_params_from(&a, &["w"])?;
    assert_eq!(b.run(&[])?[0], vec![1.0, 4.0, 9.0]);
    a.run(&[("x", &[1.0, 1.0, 1.0])])?;
    // The update replaced the device buffer behind the shared slot: `read` sees it.
    assert_eq!(b.run(&[])?[0], vec![4.0, 9.0, 16.0]);
    Ok(())
}
