//! A compiled training step runs without heap allocation once warm: a tiny GPT's loss, its
//! gradients (embedding scatter, attention, layer norm and cross-entropy backward), global-norm
//! clipping and the AdamW update, all in one graph; in f32 and under bf16 mixed precision (casts,
//! loss scaling). A counting allocator sees every thread, pool workers included; the file runs
//! without libtest (`harness = false`), whose own threads could allocate while runs are counted.

use rlx_driver::Device;
use rlx_driver::alloc_count::{CountingAllocator, count};
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::train::build_step_graph;
use rlx_nn::{Adam, MixedPrecision, ParamStore, Rng, TrainConfig};
use rlx_runtime::Session;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Loss before the first step and after 7 steps on one batch, and the allocations of steps 3-7.
fn steps(tc: &TrainConfig) -> (f32, f32, usize) {
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let cfg =
        GptConfig { ctx: 16, layers: 1, heads: 2, dim: 32, mlp_mult: 2, ..GptConfig::small(gpt::vocab_of(&text)) };
    let tokens = cfg.encode(&text).unwrap();
    let (model, specs) = gpt::loss_graph(&cfg, 8).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let opt = Adam::adamw(Schedule::WarmupCosine { peak: 1e-2, warmup: 2, total: 20, end: 0.0 }, 0.1);
    let (step, extra) = build_step_graph(&model, &opt, tc).unwrap();
    let mut exe = Session::new(Device::Cpu).compile(step).unwrap();
    let names: Vec<String> = exe.params().iter().map(|(n, _)| n.clone()).collect();
    for name in &names {
        let t = match extra.iter().find(|s| &s.name == name) {
            Some(spec) if !store.contains(name) => spec.init.sample(name, &spec.dims, 0).unwrap(),
            _ => store.get(name).unwrap().clone(),
        };
        exe.set_param_tensor(name, &t).unwrap();
    }
    let (x, y) = gpt::batch(&tokens, 8, cfg.ctx, &mut Rng::new(3)).unwrap();
    let (xb, yb) = (x.to_bytes(), y.to_bytes());
    let ins: Vec<&[u8]> = exe.inputs().iter().map(|(n, _)| if n == "x" { &xb[..] } else { &yb[..] }).collect();
    let mut loss = [0u8; 4];
    exe.run_into(&ins, &mut [&mut loss]).unwrap();
    let first = f32::from_le_bytes(loss);
    exe.run_into(&ins, &mut [&mut loss]).unwrap();
    let n = count(|| {
        for _ in 0..5 {
            exe.run_into(&ins, &mut [&mut loss]).unwrap();
        }
    });
    (first, f32::from_le_bytes(loss), n)
}

fn main() {
    let clip = TrainConfig { clip_norm: Some(1.0), ..TrainConfig::default() };
    let amp = TrainConfig { amp: Some(MixedPrecision::bf16()), ..clip };
    for (what, tc) in [("f32", clip), ("bf16 mixed precision", amp)] {
        let (first, last, n) = steps(&tc);
        assert_eq!(n, 0, "{what}: {n} allocations in 5 warm training steps");
        // The same batch each step: the updates in place must lower its loss.
        assert!(last < first, "{what}: the loss on one batch did not fall: {first} -> {last}");
        println!("zero_alloc_train: {what} steps allocate nothing (loss {first:.3} -> {last:.3})");
    }
}
