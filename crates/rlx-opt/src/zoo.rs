//! Reference graphs for the optimizer's tests and benchmarks: an MLP, a BERT/MiniLM encoder
//! layer and a Qwen3-style decoder layer, built with the plain graph builder (as a user or the
//! models crate would, with explicit transposes, reshapes and bias adds for the passes to clean).

use rlx_ir::ops::MaskKind;
use rlx_ir::{DType, Graph, NodeId, Shape};

fn p(g: &mut Graph, name: &str, dims: &[usize]) -> NodeId {
    p_in(g, DType::F32, name, dims)
}

fn p_in(g: &mut Graph, dtype: DType, name: &str, dims: &[usize]) -> NodeId {
    g.param(name, Shape::new(dims, dtype))
}

/// `x @ w^T + b` with `w` stored `[out, in]` as in PyTorch checkpoints (the transpose is explicit).
pub fn linear(g: &mut Graph, x: NodeId, name: &str, d_in: usize, d_out: usize, bias: bool) -> NodeId {
    linear_in(g, DType::F32, x, name, d_in, d_out, bias)
}

/// `linear` with its weight (and bias) in `dtype`.
pub fn linear_in(g: &mut Graph, dtype: DType, x: NodeId, name: &str, d_in: usize, d_out: usize, bias: bool) -> NodeId {
    let w = p_in(g, dtype, &format!("{name}.weight"), &[d_out, d_in]);
    let wt = g.transpose(w, &[1, 0]);
    let y = g.matmul(x, wt);
    if bias {
        let b = p_in(g, dtype, &format!("{name}.bias"), &[d_out]);
        g.add(y, b)
    } else {
        y
    }
}

/// An MLP over `[batch, dims[0]]`: linear + gelu between layers.
pub fn mlp(batch: usize, dims: &[usize]) -> Graph {
    let mut g = Graph::new("mlp");
    let mut x = g.input("x", Shape::new(&[batch, dims[0]], DType::F32));
    for i in 0..dims.len() - 1 {
        x = linear(&mut g, x, &format!("l{i}"), dims[i], dims[i + 1], true);
        if i + 2 < dims.len() {
            x = g.gelu(x);
        }
    }
    g.set_outputs(vec![x]);
    g
}

/// `[s, heads*dh]` to `[1, heads, s, dh]`.
fn split_heads(g: &mut Graph, x: NodeId, s: usize, heads: usize, dh: usize) -> NodeId {
    let r = g.reshape(x, &[1, s, heads, dh]);
    g.transpose(r, &[0, 2, 1, 3])
}

/// One BERT / MiniLM encoder layer (post-norm) on `[s, d]`; `layers` stacked.
pub fn bert_encoder(s: usize, d: usize, heads: usize, ffn: usize, layers: usize) -> Graph {
    let mut g = Graph::new("bert");
    let dh = d / heads;
    let mut x = g.input("x", Shape::new(&[s, d], DType::F32));
    for l in 0..layers {
        let n = |k: &str| format!("layer{l}.{k}");
        let q = linear(&mut g, x, &n("q"), d, d, true);
        let k = linear(&mut g, x, &n("k"), d, d, true);
        let v = linear(&mut g, x, &n("v"), d, d, true);
        let (q, k, v) = (
            split_heads(&mut g, q, s, heads, dh),
            split_heads(&mut g, k, s, heads, dh),
            split_heads(&mut g, v, s, heads, dh),
        );
        let a = g.attention(q, k, v, MaskKind::None, 1.0 / (dh as f32).sqrt());
        let a = g.transpose(a, &[0, 2, 1, 3]);
        let a = g.reshape(a, &[s, d]);
        let o = linear(&mut g, a, &n("o"), d, d, true);
        let r = g.add(x, o);
        let (g1, b1) = (p(&mut g, &n("ln1.weight"), &[d]), p(&mut g, &n("ln1.bias"), &[d]));
        let x1 = g.layer_norm(r, g1, b1, 1e-12);
        let h = linear(&mut g, x1, &n("ffn.up"), d, ffn, true);
        let h = g.gelu(h);
        let f = linear(&mut g, h, &n("ffn.down"), ffn, d, true);
        let r2 = g.add(x1, f);
        let (g2, b2) = (p(&mut g, &n("ln2.weight"), &[d]), p(&mut g, &n("ln2.bias"), &[d]));
        x = g.layer_norm(r2, g2, b2, 1e-12);
    }
    g.set_outputs(vec![x]);
    g
}

/// One Qwen3-style decoder layer on `[s, d]`: rms_norm, grouped-query causal attention with
/// q/k norms and rope, residual, rms_norm, SwiGLU MLP, residual.
pub fn qwen3_decoder(s: usize, d: usize, heads: usize, kv_heads: usize, dh: usize, ffn: usize) -> Graph {
    qwen3_decoder_in(DType::F32, s, d, heads, kv_heads, dh, ffn)
}

/// `qwen3_decoder` with x and every weight in `dtype` (bf16 as Qwen3 checkpoints ship).
pub fn qwen3_decoder_in(
    dtype: DType,
    s: usize,
    d: usize,
    heads: usize,
    kv_heads: usize,
    dh: usize,
    ffn: usize,
) -> Graph {
    let mut g = Graph::new("qwen3");
    let x = g.input("x", Shape::new(&[s, d], dtype));
    let p = |g: &mut Graph, name: &str, dims: &[usize]| p_in(g, dtype, name, dims);
    // No biases in Qwen3.
    let linear = |g: &mut Graph, x: NodeId, name: &str, d_in: usize, d_out: usize| {
        linear_in(g, dtype, x, name, d_in, d_out, false)
    };
    let pos = g.input("positions", Shape::new(&[s], DType::I64));
    let n1 = p(&mut g, "input_layernorm.weight", &[d]);
    let h = g.rms_norm(x, n1, 1e-6);
    let q = linear(&mut g, h, "q_proj", d, heads * dh);
    let k = linear(&mut g, h, "k_proj", d, kv_heads * dh);
    let v = linear(&mut g, h, "v_proj", d, kv_heads * dh);
    let q = split_heads(&mut g, q, s, heads, dh);
    let k = split_heads(&mut g, k, s, kv_heads, dh);
    let v = split_heads(&mut g, v, s, kv_heads, dh);
    let qn = p(&mut g, "q_norm.weight", &[dh]);
    let kn = p(&mut g, "k_norm.weight", &[dh]);
    let q = g.rms_norm(q, qn, 1e-6);
    let k = g.rms_norm(k, kn, 1e-6);
    let q = g.rope(q, pos, 1e6);
    let k = g.rope(k, pos, 1e6);
    let a = g.attention(q, k, v, MaskKind::Causal, 1.0 / (dh as f32).sqrt());
    let a = g.transpose(a, &[0, 2, 1, 3]);
    let a = g.reshape(a, &[s, heads * dh]);
    let o = linear(&mut g, a, "o_proj", heads * dh, d);
    let r = g.add(x, o);
    let n2 = p(&mut g, "post_attention_layernorm.weight", &[d]);
    let h2 = g.rms_norm(r, n2, 1e-6);
    let gate = linear(&mut g, h2, "gate_proj", d, ffn);
    let up = linear(&mut g, h2, "up_proj", d, ffn);
    let act = g.silu(gate);
    let m = g.mul(act, up);
    let down = linear(&mut g, m, "down_proj", ffn, d);
    let y = g.add(r, down);
    g.set_outputs(vec![y]);
    g
}
