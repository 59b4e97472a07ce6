//! Checkpointed scan VJP (`Scan::checkpoint`): the gradients equal the plain VJP's (reversed
//! scans, several carries, an integer carry, trip counts with and without a remainder segment),
//! and the compiled plan's peak arena bytes (`CompileReport::peak_arena_bytes`, what
//! `RLX_COMPILE_REPORT=1` prints) shrink from `T` steps of residuals to about `2 sqrt(T)`.

use rlx_autodiff::{grad_with_loss, leaf};
use rlx_driver::CompileOptions;
use rlx_ir::ops::control::{checkpoint_scans, sqrt_segments};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

mod common;

use common::session::{Feeds, assert_close, cpu, eval, f64s, multi_scan, rnn_step, vals};

/// The checkpoint of every scan node of `g`.
fn checkpoints(g: &Graph) -> Vec<Option<usize>> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Scan(s) => Some(s.checkpoint),
            _ => None,
        })
        .collect()
}

fn multi_feeds(t: usize) -> Feeds {
    let r = |n: usize, seed: u64| rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, seed);
    vec![
        ("h0".into(), f64s(&[3], &r(3, 1))),
        ("xs".into(), f64s(&[t, 3], &r(3 * t, 2))),
        ("us".into(), f64s(&[t], &r(t, 3))),
        ("w".into(), f64s(&[3], &r(3, 4))),
    ]
}

/// Checkpointed gradients equal the plain ones, forward and reversed, for segment lengths that
/// divide the trip count, leave a remainder, or leave fewer than two segments (the plain rule).
#[test]
fn checkpointed_gradients_match_the_plain_vjp() {
    let t = 11;
    let feeds = multi_feeds(t);
    let names = ["h0", "xs", "us", "w"];
    for reverse in [false, true] {
        let g = multi_scan(t, reverse);
        let ids = |g: &Graph| names.iter().map(|n| leaf(g, n).unwrap()).collect::<Vec<_>>();
        let want = eval(&grad_with_loss(&g, &ids(&g)).unwrap(), &feeds);
        for k in [1, 2, 3, 5, 6, 11] {
            let c = checkpoint_scans(&g, |_| Some(k));
            assert_eq!(checkpoints(&c), vec![Some(k); 3]);
            let gr = grad_with_loss(&c, &ids(&c)).unwrap_or_else(|e| panic!("k {k}: {e}"));
            for (label, got) in [("reference", eval(&gr, &feeds)), ("cpu", cpu(&gr, &feeds))] {
                for (o, (a, b)) in got.iter().zip(&want).enumerate() {
                    let what = format!("reverse {reverse} k {k} {label} output {o}");
                    assert_close(&what, &vals(a), &vals(b), 1e-12);
                }
            }
        }
    }
}

/// The checkpoint survives the text form and serde (and is absent when unset).
#[test]
fn checkpoint_round_trips_through_text_and_json() {
    let g = checkpoint_scans(&multi_scan(6, true), sqrt_segments);
    assert_eq!(checkpoints(&g), vec![Some(3); 3]);
    let text = g.to_text();
    assert!(text.contains("\"checkpoint\":3"), "{text}");
    let back = Graph::from_text(&text).unwrap();
    assert_eq!(checkpoints(&back), vec![Some(3); 3]);
    assert_eq!(back, g);
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
    assert!(!multi_scan(6, true).to_text().contains("checkpoint"));
}

/// `h <- tanh(x wx + h wh + b)`, hidden 32, over `t` steps; loss `sum(h_t^2)`: only the final
/// carry, so what the plain VJP stacks (every step's carry and residuals) dominates its arena.
fn rnn(t: usize) -> Graph {
    let (n, d, h) = (1, 2, 32);
    let s = |dims: &[usize]| Shape::new(dims, DType::F64);
    let body = rnn_step(n, d, h);
    let mut g = Graph::new(format!("rnn{t}"));
    let xs = g.input("xs", s(&[t, n, d]));
    let h0 = g.param("h0", s(&[n, h]));
    let wx = g.param("wx", s(&[d, h]));
    let wh = g.param("wh", s(&[h, h]));
    let b = g.param("b", s(&[h]));
    let (last, _) = g.scan(body, h0, xs, &[wx, wh, b]);
    let sq = g.square(last);
    let loss = g.sum_all(sq);
    g.set_outputs(vec![loss]);
    g
}

fn rnn_feeds(t: usize) -> Feeds {
    let r = |n: usize, lo: f64, hi: f64, seed: u64| rlx_ir::ops::util::rand_f64(n, lo, hi, seed);
    vec![
        ("xs".into(), f64s(&[t, 1, 2], &r(t * 2, -1.0, 1.0, 11))),
        ("h0".into(), f64s(&[1, 32], &r(32, -0.5, 0.5, 12))),
        ("wx".into(), f64s(&[2, 32], &r(64, -0.5, 0.5, 13))),
        ("wh".into(), f64s(&[32, 32], &r(1024, -0.15, 0.15, 14))),
        ("b".into(), f64s(&[32], &r(32, -0.1, 0.1, 15))),
    ]
}

/// The CPU pipeline's report for `g` (what `RLX_COMPILE_REPORT=1` prints).
fn report(g: &Graph) -> rlx_opt::CompileReport {
    let backend = rlx_cpu::CpuBackend::default();
    rlx_opt::optimize(g.clone(), &backend, &CompileOptions::default(), &[]).unwrap().report
}

/// A 10,000-step RNN (hidden 32): the checkpointed gradient (segments of 100 steps) equals the
/// plain one within 1e-10 on the CPU, and its plan's peak arena bytes are a small fraction of
/// the plain plan's, which stacks every step's carry and residuals.
#[test]
fn ten_thousand_steps_checkpointed_use_a_fraction_of_the_arena() {
    let t = 10_000;
    let g = rnn(t);
    let feeds = rnn_feeds(t);
    let wrt: Vec<NodeId> = ["h0", "wx", "wh", "b", "xs"].iter().map(|p| leaf(&g, p).unwrap()).collect();
    let plain = grad_with_loss(&g, &wrt).unwrap();
    let c = checkpoint_scans(&g, sqrt_segments);
    assert_eq!(checkpoints(&c), vec![Some(100); 2]);
    let ckpt = grad_with_loss(&c, &wrt).unwrap();
    let (rp, rc) = (report(&plain), report(&ckpt));
    println!("plain VJP ({t} steps):\n{rp}");
    println!("checkpointed VJP ({t} steps, segments of 100):\n{rc}");
    let (bp, bc) = (rp.peak_arena_bytes(), rc.peak_arena_bytes());
    println!("peak arena bytes: plain {bp}, checkpointed {bc} ({:.1}x smaller)", bp as f64 / bc as f64);
    assert!(bc * 8 < bp, "checkpointed {bc} bytes vs plain {bp}");
    let (a, b) = (cpu(&plain, &feeds), cpu(&ckpt, &feeds));
    for (o, (x, y)) in b.iter().zip(&a).enumerate() {
        assert_close(&format!("10k-step grad output {o}"), &vals(x), &vals(y), 1e-10);
    }
}
