//! Data-parallel training over in-process ranks (`rlx_dist::thread_group`): the same params as one
//! process training on the global batch, on every rank.

use rlx_dist::{Collective, thread_group};
use rlx_ir::{HostTensor, Shape};
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::train_dp::{DataParallelStep, DpError, shard_rows};
use rlx_nn::{Adam, MixedPrecision, Optimizer, ParamStore, Rng, Sgd, TrainConfig, TrainStep};

fn tiny_gpt() -> (GptConfig, Vec<i64>) {
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let cfg =
        GptConfig { ctx: 16, layers: 1, heads: 2, dim: 32, mlp_mult: 2, ..GptConfig::small(gpt::vocab_of(&text)) };
    let tokens = cfg.encode(&text).unwrap();
    (cfg, tokens)
}

fn adamw() -> Adam {
    Adam { b2: 0.99, ..Adam::adamw(Schedule::WarmupCosine { peak: 1e-2, warmup: 5, total: 20, end: 1e-3 }, 0.1) }
}

/// The global batch of each of `steps` updates, from one seed.
fn batches(tokens: &[i64], ctx: usize, global: usize, steps: usize) -> Vec<(HostTensor, HostTensor)> {
    let mut rng = Rng::new(5);
    (0..steps).map(|_| gpt::batch(tokens, global, ctx, &mut rng).unwrap()).collect()
}

/// Rows `[i * n / k, (i + 1) * n / k)` of `t`.
fn rows(t: &HostTensor, i: usize, k: usize) -> HostTensor {
    let mut dims = t.dims();
    dims[0] /= k;
    HostTensor::from_bytes(Shape::new(&dims, t.dtype()), &shard_rows("t", t, i, k).unwrap()).unwrap()
}

/// Per tensor, max |a - b| over max |b|: the largest difference relative to the tensor's scale.
fn max_rel(a: &ParamStore, b: &ParamStore) -> f64 {
    let mut m = 0f64;
    for (n, t) in b.iter() {
        let (u, v) = (a.get(n).unwrap().to_f64_vec().unwrap(), t.to_f64_vec().unwrap());
        let scale = v.iter().fold(0f64, |s, x| s.max(x.abs())).max(1e-30);
        m = u.iter().zip(&v).fold(m, |m, (p, q)| m.max((p - q).abs() / scale));
    }
    m
}

fn same_bits(a: &ParamStore, b: &ParamStore) -> bool {
    a.len() == b.len() && a.iter().all(|(n, t)| t.to_bytes() == b.get(n).unwrap().to_bytes())
}

/// Trains `steps` updates of `cfg.accum` micro-steps on `ranks` in-process ranks, each update on
/// one global batch of `global` rows; returns each rank's params and losses.
fn train_dp(
    opt: impl Optimizer + Clone + Send + 'static,
    ranks: usize,
    global: usize,
    steps: usize,
    cfg: TrainConfig,
) -> Vec<(ParamStore, Vec<f32>)> {
    let (gc, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&gc, global / ranks / cfg.accum).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let data = batches(&tokens, gc.ctx, global, steps);
    let hs: Vec<_> = thread_group(ranks)
        .into_iter()
        .map(|c| {
            let (g, data, opt) = (g.clone(), data.clone(), opt.clone());
            // Only rank 0's store counts: the others start from other params, which the broadcast
            // at the start replaces.
            let store = if c.rank() == 0 { store.clone() } else { ParamStore::init(&specs, 99).unwrap() };
            std::thread::spawn(move || {
                let mut step = DataParallelStep::new(&g, &store, &opt, &cfg, Box::new(c)).unwrap();
                let mut losses = vec![];
                for (x, y) in &data {
                    for m in 0..cfg.accum {
                        let (x, y) = (rows(x, m, cfg.accum), rows(y, m, cfg.accum));
                        let l = step.step(&[("x", &x), ("y", &y)]).unwrap();
                        assert_eq!(l.is_some(), m + 1 == cfg.accum, "a loss on the update's last micro-step only");
                        losses.extend(l);
                    }
                }
                step.check_in_sync().unwrap();
                assert_eq!(step.count().unwrap(), steps as u64);
                assert_eq!(step.stats().updates, steps as u64);
                (step.params().unwrap(), losses)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// One process: each update's global batch as `cfg.accum` micro-batches of consecutive rows.
fn train_one(opt: &dyn Optimizer, global: usize, steps: usize, cfg: TrainConfig) -> (ParamStore, Vec<f32>) {
    let (gc, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&gc, global / cfg.accum).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let mut step = TrainStep::new(&g, &store, opt, &cfg).unwrap();
    let mut losses = vec![];
    for (x, y) in &batches(&tokens, gc.ctx, global, steps) {
        let mut sum = 0.0;
        for m in 0..cfg.accum {
            let (x, y) = (rows(x, m, cfg.accum), rows(y, m, cfg.accum));
            sum += step.step(&[("x", &x), ("y", &y)]).unwrap() / cfg.accum as f32;
        }
        losses.push(sum);
    }
    (step.params().unwrap(), losses)
}

#[test]
fn two_ranks_with_sgd_train_like_one_process_on_the_global_batch() {
    let sgd = Sgd { lr: Schedule::Constant(0.1), momentum: 0.9, nesterov: false };
    let cfg = TrainConfig { clip_norm: Some(1.0), ..TrainConfig::default() };
    let (one, one_losses) = train_one(&sgd, 8, 20, cfg);
    let ranks = train_dp(sgd, 2, 8, 20, cfg);
    let rel = max_rel(&ranks[0].0, &one);
    println!("SGD, 2 ranks vs 1 process on the global batch, 20 steps: params differ by at most {rel:.3e} relative");
    assert!(rel < 1e-6, "params differ by {rel:.3e} relative");
    assert!(same_bits(&ranks[0].0, &ranks[1].0), "the ranks' params differ");
    assert_eq!(ranks[0].1, ranks[1].1, "every rank reports the same loss");
    for (a, b) in ranks[0].1.iter().zip(&one_losses) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "loss {a} vs {b}");
    }
    assert!(one_losses[19] < one_losses[0] - 0.3, "it trained: {one_losses:?}");
}

/// AdamW amplifies f32 rounding (a grad summed in another order moves a param by up to the
/// learning rate where the grad is near zero): one process on the full batch and on the same
/// batch as two micro-batches differ by ~2e-3 relative after 20 steps. Two ranks are the second
/// computation exactly: rank r's shard is micro-batch r, and the all-reduce adds in the same order.
#[test]
fn two_ranks_with_adamw_equal_one_process_accumulating_the_shards_bit_for_bit() {
    let cfg = TrainConfig { clip_norm: Some(1.0), ..TrainConfig::default() };
    let (one, one_losses) = train_one(&adamw(), 8, 20, TrainConfig { accum: 2, ..cfg });
    let ranks = train_dp(adamw(), 2, 8, 20, cfg);
    let (full, _) = train_one(&adamw(), 8, 20, cfg);
    println!(
        "AdamW, 20 steps: 2 ranks vs 1 process accumulating the shards {:.3e}, vs 1 process on the full batch {:.3e}, and 1 process: full batch vs 2 micro-batches {:.3e} relative",
        max_rel(&ranks[0].0, &one),
        max_rel(&ranks[0].0, &full),
        max_rel(&one, &full)
    );
    assert!(same_bits(&ranks[0].0, &one), "2 ranks differ from 1 process by {:.3e}", max_rel(&ranks[0].0, &one));
    assert!(same_bits(&ranks[1].0, &one), "the ranks' params differ");
    assert_eq!(ranks[0].1, one_losses);
}

/// One rank (`Local`) is `TrainStep` split in two graphs: the grad graph must read the params the
/// update graph wrote (the CPU caches packed weights by param version), so 20 steps agree bit for bit.
#[test]
fn one_local_rank_equals_train_step_bit_for_bit() {
    let cfg = TrainConfig { clip_norm: Some(1.0), ..TrainConfig::default() };
    let (one, one_losses) = train_one(&adamw(), 8, 20, cfg);
    let (gc, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&gc, 8).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let mut step = DataParallelStep::new(&g, &store, &adamw(), &cfg, Box::new(rlx_dist::Local)).unwrap();
    let mut losses = vec![];
    for (x, y) in &batches(&tokens, gc.ctx, 8, 20) {
        losses.extend(step.step(&[("x", x), ("y", y)]).unwrap());
    }
    assert!(same_bits(&step.params().unwrap(), &one), "differs by {:.3e}", max_rel(&step.params().unwrap(), &one));
    assert_eq!(losses, one_losses);
    assert!(max_rel(&store, &one) > 1e-2, "the params moved");
}

#[test]
fn accumulation_and_mixed_precision_keep_ranks_equal() {
    let sgd = Sgd { lr: Schedule::Constant(0.1), momentum: 0.9, nesterov: false };
    let cfg = TrainConfig { accum: 2, ..TrainConfig::default() };
    let (one, _) = train_one(&sgd, 8, 6, TrainConfig { accum: 1, ..cfg });
    let ranks = train_dp(sgd, 2, 8, 6, cfg);
    let rel = max_rel(&ranks[0].0, &one);
    assert!(rel < 1e-6, "accumulated: params differ by {rel:.3e} relative");
    assert!(same_bits(&ranks[0].0, &ranks[1].0), "accumulated: the ranks' params differ");
    let amp = TrainConfig { amp: Some(MixedPrecision::f16()), ..TrainConfig::default() };
    let ranks = train_dp(adamw(), 2, 8, 4, amp);
    assert!(same_bits(&ranks[0].0, &ranks[1].0), "mixed precision: the ranks' params differ");
    assert!(ranks[0].1.iter().all(|l| l.is_finite()), "{:?}", ranks[0].1);
}

#[test]
fn an_uneven_batch_and_ranks_out_of_sync_are_errors() {
    let (gc, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&gc, 2).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let mut rng = Rng::new(1);
    let (x5, y5) = gpt::batch(&tokens, 5, gc.ctx, &mut rng).unwrap();
    let (x4, _) = gpt::batch(&tokens, 4, gc.ctx, &mut rng).unwrap();
    let hs: Vec<_> = thread_group(2)
        .into_iter()
        .map(|c| {
            let (g, store, x5, y5, x4) = (g.clone(), store.clone(), x5.clone(), y5.clone(), x4.clone());
            std::thread::spawn(move || {
                let rank = c.rank();
                let cfg = TrainConfig::default();
                let mut step = DataParallelStep::new(&g, &store, &adamw(), &cfg, Box::new(c)).unwrap();
                let e = step.step(&[("x", &x5), ("y", &y5)]).unwrap_err();
                assert!(matches!(e, DpError::Uneven { rows: 5, ranks: 2, .. }), "{e}");
                let e = step.step(&[("nope", &x5)]).unwrap_err();
                assert!(e.to_string().contains("`nope`"), "{e}");
                let e = step.step(&[("x", &x4)]).unwrap_err();
                assert!(matches!(&e, DpError::MissingInput { name } if name == "y"), "{e}");
                step.check_in_sync().unwrap();
                if rank == 1 {
                    let mut w = step.params().unwrap().get("wpe.w").unwrap().clone();
                    let mut v = w.to_f32_vec().unwrap();
                    v[0] += 1.0;
                    w = HostTensor::from_f32(&w.dims(), &v).unwrap();
                    step.set("wpe.w", &w).unwrap();
                }
                step.check_in_sync().unwrap_err()
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap();
        assert!(matches!(e, DpError::OutOfSync { differing: 1, size: 2, .. }), "{e}");
    }
}
