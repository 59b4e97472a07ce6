//! One Qwen3-0.6B-shaped decoder layer (d 1024, 16 query / 8 key-value heads of 128, SwiGLU 3072)
//! over a prefill of `seq` tokens, f32: RLX against candle-transformers' Qwen3 (a one-layer model,
//! 64-token vocabulary, tied head) and JAX jit, on the same generated weights. Every runtime
//! computes embedding rows -> layer -> final rms_norm; candle adds its 64-logit head on the last
//! token. Outputs are checked against each other before the timings are printed.

use crate::peers::PyPeers;
use crate::probe::pingpong_ns;
use crate::stats::{Timer, median};
use candle_core::{DType as CDType, Device as CDevice, Tensor};
use candle_nn::{Activation, VarBuilder};
use candle_transformers::models::qwen3::{Config, ModelForCausalLM};
use rlx_driver::Device;
use rlx_ir::{DType, Shape};
use rlx_runtime::{CompiledGraph, Session};
use std::collections::HashMap;

const D: usize = 1024;
const HEADS: usize = 16;
const KV_HEADS: usize = 8;
const DH: usize = 128;
const FFN: usize = 3072;
const VOCAB: usize = 64;
const EPS: f64 = 1e-6;
const THETA: f64 = 1e6;

fn err(e: impl std::fmt::Display) -> String {
    format!("qwen3: {e}")
}

/// Deterministic values in [-0.5, 0.5) times `scale`, plus `shift`.
fn values(n: usize, seed: u32, scale: f32, shift: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(97_531)) >> 8;
            shift + scale * (h as f32 / 16_777_216.0 - 0.5)
        })
        .collect()
}

/// The layer's weights under the RLX graph's names (`rlx_opt::zoo::qwen3_decoder`, plus
/// `norm.weight`), with their shapes and candle's names.
fn weights() -> Vec<(&'static str, &'static str, Vec<usize>, Vec<f32>)> {
    // Projections: variance about 1 / fan-in; norm gains near 1.
    let proj = |seed, out: usize, fan_in: usize| values(out * fan_in, seed, 3.46 / (fan_in as f32).sqrt(), 0.0);
    let gain = |seed, n: usize| values(n, seed, 0.4, 1.0);
    vec![
        ("embed", "model.embed_tokens.weight", vec![VOCAB, D], values(VOCAB * D, 1, 2.0, 0.0)),
        ("input_layernorm.weight", "model.layers.0.input_layernorm.weight", vec![D], gain(2, D)),
        ("q_proj.weight", "model.layers.0.self_attn.q_proj.weight", vec![HEADS * DH, D], proj(3, HEADS * DH, D)),
        ("k_proj.weight", "model.layers.0.self_attn.k_proj.weight", vec![KV_HEADS * DH, D], proj(4, KV_HEADS * DH, D)),
        ("v_proj.weight", "model.layers.0.self_attn.v_proj.weight", vec![KV_HEADS * DH, D], proj(5, KV_HEADS * DH, D)),
        ("q_norm.weight", "model.layers.0.self_attn.q_norm.weight", vec![DH], gain(6, DH)),
        ("k_norm.weight", "model.layers.0.self_attn.k_norm.weight", vec![DH], gain(7, DH)),
        ("o_proj.weight", "model.layers.0.self_attn.o_proj.weight", vec![D, HEADS * DH], proj(8, D, HEADS * DH)),
        ("post_attention_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", vec![D], gain(9, D)),
        ("gate_proj.weight", "model.layers.0.mlp.gate_proj.weight", vec![FFN, D], proj(10, FFN, D)),
        ("up_proj.weight", "model.layers.0.mlp.up_proj.weight", vec![FFN, D], proj(11, FFN, D)),
        ("down_proj.weight", "model.layers.0.mlp.down_proj.weight", vec![D, FFN], proj(12, D, FFN)),
        ("norm.weight", "model.norm.weight", vec![D], gain(13, D)),
    ]
}

/// Token ids of the prefill.
fn ids(seq: usize) -> Vec<u32> {
    (0..seq).map(|i| ((i * 7 + 3) % VOCAB) as u32).collect()
}

/// RLX: the compiled layer with its inputs as raw bytes and a preallocated output.
struct Rlx {
    c: CompiledGraph,
    ins: Vec<Vec<u8>>,
    out: Vec<u8>,
    bf16: bool,
}

/// `v` as little-endian bytes of f32, or of bf16 (rounded to nearest even).
fn bytes(v: &[f32], bf16: bool) -> Vec<u8> {
    if bf16 {
        v.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect()
    } else {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
}

impl Rlx {
    fn new(seq: usize, w: &[(&str, &str, Vec<usize>, Vec<f32>)], bf16: bool) -> Result<(Self, f64), String> {
        let dt = if bf16 { DType::BF16 } else { DType::F32 };
        let mut g = rlx_opt::zoo::qwen3_decoder_in(dt, seq, D, HEADS, KV_HEADS, DH, FFN);
        let y = g.outputs()[0];
        let nw = g.param("norm.weight", Shape::new(&[D], dt));
        let z = g.rms_norm(y, nw, EPS as f32);
        g.set_outputs(vec![z]);
        let t = std::time::Instant::now();
        let mut c = Session::new(Device::Cpu).compile(g).map_err(err)?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        for (name, _, _, v) in w.iter().filter(|(n, ..)| *n != "embed") {
            c.set_param_typed(name, &bytes(v, bf16), dt).map_err(err)?;
        }
        // The embedding rows of the ids are the layer's input x.
        let embed = &w[0].3;
        let x: Vec<f32> = ids(seq).iter().flat_map(|&t| embed[t as usize * D..(t as usize + 1) * D].to_vec()).collect();
        let pos: Vec<i64> = (0..seq as i64).collect();
        let mut ins = vec![];
        for (name, _) in c.inputs() {
            ins.push(match name.as_str() {
                "x" => bytes(&x, bf16),
                "positions" => pos.iter().flat_map(|v| v.to_le_bytes()).collect(),
                other => return Err(err(format!("unexpected input {other}"))),
            });
        }
        let out = vec![0u8; seq * D * dt.size_bytes()];
        Ok((Rlx { c, ins, out, bf16 }, compile_ms))
    }

    fn run(&mut self) -> Result<(), String> {
        let ins: Vec<&[u8]> = self.ins.iter().map(|b| b.as_slice()).collect();
        self.c.run_into(&ins, &mut [self.out.as_mut_slice()]).map_err(err)
    }

    /// The last token's normalized hidden state.
    fn last_row(&self) -> Vec<f32> {
        if self.bf16 {
            let row = &self.out[self.out.len() - D * 2..];
            return row.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
        }
        let row = &self.out[self.out.len() - D * 4..];
        row.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }
}

/// candle: a one-layer Qwen3 with a tied 64-logit head, its KV cache cleared before each call.
struct Candle {
    model: ModelForCausalLM,
    ids: Tensor,
}

impl Candle {
    fn new(seq: usize, w: &[(&str, &str, Vec<usize>, Vec<f32>)]) -> Result<Self, String> {
        let cfg = Config {
            vocab_size: VOCAB,
            hidden_size: D,
            intermediate_size: FFN,
            num_hidden_layers: 1,
            num_attention_heads: HEADS,
            head_dim: DH,
            attention_bias: false,
            num_key_value_heads: KV_HEADS,
            max_position_embeddings: seq.max(16),
            sliding_window: None,
            max_window_layers: 1,
            tie_word_embeddings: true,
            rope_theta: THETA,
            rms_norm_eps: EPS,
            use_sliding_window: false,
            hidden_act: Activation::Silu,
        };
        let model = ModelForCausalLM::new(&cfg, VarBuilder::from_tensors(tensors(w)?, CDType::F32, &CDevice::Cpu))
            .map_err(err)?;
        let ids = Tensor::from_vec(ids(seq), (1, seq), &CDevice::Cpu).map_err(err)?;
        Ok(Candle { model, ids })
    }

    /// One prefill; returns the last token's logits.
    fn run(&mut self) -> Result<Vec<f32>, String> {
        self.model.clear_kv_cache();
        let l = self.model.forward(&self.ids, 0).map_err(err)?;
        l.flatten_all().map_err(err)?.to_vec1::<f32>().map_err(err)
    }
}

/// The weights as candle tensors under candle's names.
fn tensors(w: &[(&str, &str, Vec<usize>, Vec<f32>)]) -> Result<HashMap<String, Tensor>, String> {
    w.iter()
        .map(|(_, name, shape, v)| {
            Tensor::from_vec(v.clone(), shape.as_slice(), &CDevice::Cpu).map(|t| (name.to_string(), t)).map_err(err)
        })
        .collect()
}

/// Largest |a - b| over the largest |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let m = b.iter().map(|y| y.abs()).fold(0f32, f32::max);
    if a.len() != b.len() { f64::INFINITY } else { d as f64 / m.max(1e-30) as f64 }
}

/// The layer at a prefill of `seq` tokens: RLX, candle and JAX interleaved round by round. With
/// `bf16`, x, weights and activations are bf16 (matmul sums in f32) in RLX and JAX; candle 0.9
/// has no bf16 matmul on the CPU, so it sits out.
pub fn compare(seq: usize, rounds: usize, py: &mut Option<PyPeers>, bf16: bool) -> Result<(), String> {
    let reps = if seq <= 128 { 5 } else { 2 };
    let (dt, tol) = if bf16 { ("bf16", 3e-2) } else { ("f32", 1e-3) };
    println!(
        "\n## Qwen3-0.6B-shaped decoder layer, prefill {seq} tokens, {dt} (ms, median of {} runs each; {rounds} \
         interleaved rounds)",
        rounds * reps
    );
    let w = weights();
    let (mut rlx, compile_ms) = Rlx::new(seq, &w, bf16)?;
    let mut cand = if bf16 { None } else { Some(Candle::new(seq, &w)?) };
    rlx.run()?;
    let last = rlx.last_row();
    let embed = &w[0].3;
    let logits: Vec<f32> =
        (0..VOCAB).map(|t| embed[t * D..(t + 1) * D].iter().zip(&last).map(|(a, b)| a * b).sum()).collect();
    let diff_c = match cand.as_mut() {
        Some(c) => rel_diff(&logits, &c.run()?),
        None => f64::NAN,
    };
    let use_jax = py.as_ref().is_some_and(|p| p.has("jax") && p.has("safetensors"));
    let path = std::env::temp_dir().join(format!("rlx-bench-qwen3-{}.safetensors", std::process::id()));
    if use_jax {
        candle_core::safetensors::save(&tensors(&w)?, &path).map_err(err)?;
    }
    let (mut t_r, mut t_c, mut t_j, mut pp) = (Timer::default(), Timer::default(), vec![], vec![]);
    rlx_cpu::kernels::profile::reset();
    let mut diff_j = f64::NAN;
    for round in 0..rounds {
        pp.push(pingpong_ns());
        // One untimed call each per round, as in the MiniLM comparison.
        rlx.run()?;
        for _ in 0..reps {
            t_r.time(|| rlx.run())?;
        }
        if let Some(cand) = cand.as_mut() {
            cand.run()?;
            for _ in 0..reps {
                t_c.time(|| cand.run().map(|_| ()))?;
            }
        }
        if let (true, Some(p)) = (use_jax, py.as_mut()) {
            let v = p.ask(&format!("jax_qwen3 {} {seq} {reps} {dt}", path.display()))?;
            t_j.extend(PyPeers::ms(&v));
            if round == 0 {
                let row: Vec<f32> = v
                    .get("last")
                    .and_then(|r| r.as_array())
                    .map_or(vec![], |r| r.iter().filter_map(|x| x.as_f64()).map(|x| x as f32).collect());
                diff_j = rel_diff(&last, &row);
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    let r = t_r.median_ms();
    println!("| runtime | ms | tokens/s | peer / RLX (>1: RLX faster) |");
    println!("|---|---|---|---|");
    let line = |name: &str, v: f64| {
        if v.is_nan() {
            println!("| {name} | skipped | - | - |");
        } else {
            println!("| {name} | {v:.2} | {:.0} | {:.3}x |", seq as f64 / v * 1e3, v / r);
        }
    };
    line("RLX", r);
    if bf16 {
        println!("| candle 0.9 (qwen3, 1 layer) | unsupported (no CPU bf16 matmul) | - | - |");
    } else {
        line("candle 0.9 (qwen3, 1 layer)", t_c.median_ms());
    }
    line("JAX jit", median(&t_j));
    if !use_jax {
        println!("skipped JAX: python modules jax or safetensors missing");
    }
    println!("RLX compile {compile_ms:.1} ms");
    if rlx_cpu::kernels::profile::enabled() {
        print!("{}", rlx_cpu::kernels::profile::report());
    }
    println!(
        "outputs: max |diff| / max |ref|: RLX vs candle (last-token logits) {diff_c:.2e}, RLX vs JAX (last hidden) \
         {diff_j:.2e} (need <= {tol:.0e})"
    );
    println!("ping-pong {:.0} ns (median over rounds), load average {:.2}", median(&pp), crate::probe::load_avg());
    if diff_c > tol || diff_j > tol {
        return Err(format!("RLX's layer output differs from a peer's: candle {diff_c:.2e}, JAX {diff_j:.2e}"));
    }
    Ok(())
}
