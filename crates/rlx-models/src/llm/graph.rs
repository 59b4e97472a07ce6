//! The Qwen3 / Llama decoder as an rlx graph: RMSNorm, grouped-query attention with RoPE (and
//! QK-norm for Qwen3), SwiGLU, and the LM head; optionally over a KV cache held in params.

use super::config::LlmConfig;
use super::weights::{LayerWeight, LlmWeight, LlmWeights, ParamKind};
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};

/// Input names of the LLM graphs.
pub mod names {
    /// Token ids, i64 `[batch, seq]`.
    pub const TOKENS: &str = "tokens";
    /// RoPE positions of the `seq` new tokens, i64 `[seq]` (cache slots).
    pub const POSITIONS: &str = "positions";
    /// The cache slot of the first new token, i32 scalar (cache graphs only).
    pub const START: &str = "start";
    /// Additive mask f32 `[batch, 1, seq, keys]`: 0 where visible, -inf elsewhere.
    pub const MASK: &str = "mask";
}

/// The param name of layer `l`'s key cache.
pub fn k_cache_name(l: usize) -> String {
    format!("k_cache.{l}")
}

/// The param name of layer `l`'s value cache.
pub fn v_cache_name(l: usize) -> String {
    format!("v_cache.{l}")
}

/// The shape of a graph: batch, new tokens, the cache (keys seen) and which logits come out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphSpec {
    /// Sequences run together.
    pub batch: usize,
    /// New tokens per sequence.
    pub seq: usize,
    /// Cache slots per sequence; `None`: no cache, attention over the `seq` new tokens only.
    pub cache: Option<usize>,
    /// Logits for every new token `[batch, seq, vocab]`, or only the last `[batch, vocab]`.
    pub all_logits: bool,
}

pub(super) fn linear(g: &mut Graph, x: NodeId, w: NodeId, kind: ParamKind, k: usize) -> NodeId {
    match kind {
        ParamKind::Dense => g.matmul_t(x, w, false, true),
        ParamKind::DenseHalf(dt) => {
            let xh = g.cast(x, dt);
            let xr = g.cast(xh, DType::F32);
            g.matmul_t(xr, w, false, true)
        }
        ParamKind::Packed(s) => g.qmatmul(x, w, s, k),
        // Weights kept as stored: activations rounded to the weights' dtype (as ggml does),
        // the product in that dtype, back to f32.
        ParamKind::Half(dt) => {
            let xh = g.cast(x, dt);
            let y = g.matmul_t(xh, w, false, true);
            g.cast(y, DType::F32)
        }
    }
}

pub(super) fn param(g: &mut Graph, cfg: &LlmConfig, weights: &LlmWeights, w: LlmWeight) -> (NodeId, ParamKind) {
    let shape = w.shape(cfg);
    let kind = weights.kind(w);
    let s = match kind {
        ParamKind::Dense | ParamKind::DenseHalf(_) => Shape::new(&shape, DType::F32),
        ParamKind::Packed(q) => Shape::new(&[shape[0], q.row_bytes(shape[1]).unwrap_or(0)], DType::U8),
        ParamKind::Half(dt) => Shape::new(&shape, dt),
    };
    (g.param(&w.gguf_name(), s), kind)
}

/// RoPE of x `[b, h, s, d]` with the inverse frequencies `inv` (`d / 2` of them): the
/// decomposition of the `rope` op with another table, for scaled frequencies, which the op
/// (a frequency base only) does not take.
pub(super) fn rope_with_freqs(
    g: &mut Graph,
    x: NodeId,
    positions: NodeId,
    inv: &[f64],
    interleaved: bool,
    bhs: [usize; 3],
) -> NodeId {
    let [b, h, s] = bhs;
    let half = inv.len();
    let d = 2 * half;
    let table = HostTensor::from_f64(&[1, half], DType::F32, inv).expect("[1, d/2] holds d/2 values");
    let inv_t = g.constant(table);
    let p = g.cast(positions, DType::F32);
    let p = g.reshape(p, &[s, 1]);
    let ang = g.mul(p, inv_t);
    let (c, sn) = (g.cos(ang), g.sin(ang));
    let (x1, x2, c, sn) = if interleaved {
        // Pairs as a trailing axis of 2: [b, h, s, d/2, 2], tables [s, d/2, 1].
        let x5 = g.reshape(x, &[b, h, s, half, 2]);
        let x1 = g.slice(x5, &[0, 0, 0, 0, 0], &[b, h, s, half, 1], &[1, 1, 1, 1, 1]);
        let x2 = g.slice(x5, &[0, 0, 0, 0, 1], &[b, h, s, half, 2], &[1, 1, 1, 1, 1]);
        (x1, x2, g.reshape(c, &[s, half, 1]), g.reshape(sn, &[s, half, 1]))
    } else {
        let x1 = g.slice(x, &[0, 0, 0, 0], &[b, h, s, half], &[1, 1, 1, 1]);
        let x2 = g.slice(x, &[0, 0, 0, half], &[b, h, s, d], &[1, 1, 1, 1]);
        (x1, x2, c, sn)
    };
    // (x1 cos - x2 sin, x2 cos + x1 sin), as the op.
    let (a, e) = (g.mul(x1, c), g.mul(x2, sn));
    let o1 = g.sub(a, e);
    let (a, e) = (g.mul(x2, c), g.mul(x1, sn));
    let o2 = g.add(a, e);
    let y = g.concat(&[o1, o2], -1);
    if interleaved { g.reshape(y, &[b, h, s, d]) } else { y }
}

/// The embedding rows of `tokens` (`rows` of them, any shape), as f32 `[rows, hidden]`.
pub(super) fn embed(g: &mut Graph, cfg: &LlmConfig, weights: &LlmWeights, tokens: NodeId, rows: usize) -> NodeId {
    let h = cfg.hidden;
    let (emb, ekind) = param(g, cfg, weights, LlmWeight::TokenEmbd);
    let x = g.gather(emb, tokens, 0);
    match ekind {
        // Packed rows of the looked-up tokens, dequantized: the table stays packed in memory.
        ParamKind::Packed(q) => {
            let r = g.reshape(x, &[rows, q.row_bytes(h).unwrap_or(0)]);
            g.dequantize(r, q, h)
        }
        // F16 / BF16 rows, widened after the lookup: the table stays as in the file.
        ParamKind::Half(_) => {
            let r = g.reshape(x, &[rows, h]);
            g.cast(r, DType::F32)
        }
        _ => g.reshape(x, &[rows, h]),
    }
}

/// Layer `l`'s normed input projected to q `[b, s, heads, hd]`, k and v `[b, s, kv_heads, hd]`
/// (Qwen3's QK-norm applied).
pub(super) fn qkv(
    g: &mut Graph,
    cfg: &LlmConfig,
    weights: &LlmWeights,
    l: usize,
    x: NodeId,
    [b, s]: [usize; 2],
) -> (NodeId, NodeId, NodeId) {
    use LayerWeight::*;
    let (h, eps, hd) = (cfg.hidden, cfg.rms_eps as f32, cfg.head_dim);
    let w = |g: &mut Graph, lw: LayerWeight| param(g, cfg, weights, LlmWeight::Layer(l, lw));
    let (an, _) = w(g, AttnNorm);
    let hn = g.rms_norm(x, an, eps);
    let ((wq, kq), (wk, kk), (wv, kv)) = (w(g, Q), w(g, K), w(g, V));
    let q = linear(g, hn, wq, kq, h);
    let k = linear(g, hn, wk, kk, h);
    let v = linear(g, hn, wv, kv, h);
    let mut q = g.reshape(q, &[b, s, cfg.heads, hd]);
    let mut k = g.reshape(k, &[b, s, cfg.kv_heads, hd]);
    if cfg.arch.qk_norm() {
        let ((qn, _), (kn, _)) = (w(g, QNorm), w(g, KNorm));
        q = g.rms_norm(q, qn, eps);
        k = g.rms_norm(k, kn, eps);
    }
    (q, k, g.reshape(v, &[b, s, cfg.kv_heads, hd]))
}

/// `x` plus layer `l`'s output projection of the attention rows `a` `[rows, heads * hd]`.
pub(super) fn attn_out(g: &mut Graph, cfg: &LlmConfig, weights: &LlmWeights, l: usize, a: NodeId, x: NodeId) -> NodeId {
    let (wo, ko) = param(g, cfg, weights, LlmWeight::Layer(l, LayerWeight::O));
    let a = linear(g, a, wo, ko, cfg.heads * cfg.head_dim);
    g.add(x, a)
}

/// The SwiGLU block of layer `l` with its residual: `x + down(silu(gate(n)) * up(n))`, `n` the
/// normed `x`.
pub(super) fn ffn_block(g: &mut Graph, cfg: &LlmConfig, weights: &LlmWeights, l: usize, x: NodeId) -> NodeId {
    use LayerWeight::*;
    let (h, eps) = (cfg.hidden, cfg.rms_eps as f32);
    let w = |g: &mut Graph, lw: LayerWeight| param(g, cfg, weights, LlmWeight::Layer(l, lw));
    let (fnw, _) = w(g, FfnNorm);
    let hn = g.rms_norm(x, fnw, eps);
    let ((wg, kg), (wu, ku), (wd, kd)) = (w(g, Gate), w(g, Up), w(g, Down));
    let gate = linear(g, hn, wg, kg, h);
    let up = linear(g, hn, wu, ku, h);
    let gate = g.silu(gate);
    let f = g.mul(gate, up);
    let f = linear(g, f, wd, kd, cfg.ffn);
    g.add(x, f)
}

/// The final norm and the LM head of `x` `[rows, hidden]`: logits `[rows, vocab]`.
pub(super) fn lm_head(g: &mut Graph, cfg: &LlmConfig, weights: &LlmWeights, x: NodeId) -> NodeId {
    let (on, _) = param(g, cfg, weights, LlmWeight::OutputNorm);
    let x = g.rms_norm(x, on, cfg.rms_eps as f32);
    let (wout, kout) = param(g, cfg, weights, LlmWeight::Output);
    linear(g, x, wout, kout, cfg.hidden)
}

/// RoPE of `x` `[b, heads, s, d]` at `positions` `[s]`, with the config's scaled frequencies
/// where it has them, else the op.
pub(super) fn rope(g: &mut Graph, cfg: &LlmConfig, x: NodeId, positions: NodeId, bhs: [usize; 3]) -> NodeId {
    match cfg.scaled_inv_freq() {
        Some(inv) => rope_with_freqs(g, x, positions, &inv, cfg.rope_interleaved, bhs),
        None if cfg.rope_interleaved => g.rope_interleaved(x, positions, cfg.rope_theta as f32),
        None => g.rope(x, positions, cfg.rope_theta as f32),
    }
}

/// Builds the decoder for `spec`. With a cache, each layer's new keys and values are written at
/// `start` into the `k_cache.{l}` / `v_cache.{l}` params `[batch, kv_heads, cache, head_dim]` of
/// dtype `kv_dtype` (f32, or f16/bf16: rounded as they are stored, widened as attention reads
/// them), and attention runs over the whole cache; the mask hides unwritten and padded slots,
/// and the attention kernel skips them (decode cost follows the filled length, not the cache
/// size).
pub fn llm_graph(cfg: &LlmConfig, weights: &LlmWeights, spec: GraphSpec, kv_dtype: DType) -> Graph {
    let (b, s, h) = (spec.batch, spec.seq, cfg.hidden);
    let (nh, kvh, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
    let keys = spec.cache.unwrap_or(s);
    let name = match spec.cache {
        Some(c) => format!("{}_{b}x{s}_cache{c}", cfg.arch.name()),
        None => format!("{}_{b}x{s}", cfg.arch.name()),
    };
    let mut g = Graph::new(name);
    let tokens = g.input(names::TOKENS, Shape::new(&[b, s], DType::I64));
    let positions = g.input(names::POSITIONS, Shape::new(&[s], DType::I64));
    let start = spec.cache.map(|_| g.input(names::START, Shape::new(&[], DType::I32)));
    let mask = g.input(names::MASK, Shape::new(&[b, 1, s, keys], DType::F32));

    let mut x = embed(&mut g, cfg, weights, tokens, b * s);
    let scale = 1.0 / (hd as f32).sqrt();
    for l in 0..cfg.layers {
        let (q, k, v) = qkv(&mut g, cfg, weights, l, x, [b, s]);
        // [b, s, heads, hd] to [b, heads, s, hd] (the optimizer folds these swaps into rope and
        // attention where it can). GGUF Llama Q/K rows are ordered for RoPE on adjacent pairs.
        let q = g.transpose(q, &[0, 2, 1, 3]);
        let k = g.transpose(k, &[0, 2, 1, 3]);
        let v = g.transpose(v, &[0, 2, 1, 3]);
        let q = rope(&mut g, cfg, q, positions, [b, nh, s]);
        let k = rope(&mut g, cfg, k, positions, [b, kvh, s]);
        let (k, v) = match (spec.cache, start) {
            (Some(c), Some(start)) => {
                let cache_shape = Shape::new(&[b, kvh, c, hd], kv_dtype);
                let (k, v) = if kv_dtype == DType::F32 { (k, v) } else { (g.cast(k, kv_dtype), g.cast(v, kv_dtype)) };
                let kc = g.param(&k_cache_name(l), cache_shape.clone());
                let vc = g.param(&v_cache_name(l), cache_shape);
                let k2 = g.dynamic_update_slice(kc, k, start, 2);
                let v2 = g.dynamic_update_slice(vc, v, start, 2);
                g.update_param(kc, k2);
                g.update_param(vc, v2);
                (k2, v2)
            }
            _ => (k, v),
        };
        let a = g.attention_with_mask(q, k, v, mask, scale);
        let a = g.transpose(a, &[0, 2, 1, 3]);
        let a = g.reshape(a, &[b * s, nh * hd]);
        x = attn_out(&mut g, cfg, weights, l, a, x);
        x = ffn_block(&mut g, cfg, weights, l, x);
    }
    if !spec.all_logits && s > 1 {
        // Only the last token's logits: slice before the final norm and the LM head.
        let x3 = g.reshape(x, &[b, s, h]);
        let last = g.slice_axis(x3, 1, s - 1, s);
        x = g.reshape(last, &[b, h]);
    }
    let logits = lm_head(&mut g, cfg, weights, x);
    let logits = if spec.all_logits { g.reshape(logits, &[b, s, cfg.vocab_size]) } else { logits };
    g.set_outputs(vec![logits]);
    g
}
