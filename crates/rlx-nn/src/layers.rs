//! Layers as graph builders: each `apply` declares its params under the builder's scope and
//! returns the output node. Shapes must be static.

use crate::init::Init;
use crate::module::Builder;
use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Error, HostTensor, MaskKind, NodeId};

fn bad(b: &mut Builder, layer: &str, reason: String) {
    let e =
        Error::InvalidGraph { graph: b.name().to_string(), reason: format!("{layer} `{}`: {reason}", b.full_name("")) };
    b.record(e);
}

/// Multiplies the last axis of `x` by `w` `[k, n]` (flattening leading axes so one GEMM runs).
pub fn dense(b: &mut Builder, x: NodeId, w: NodeId) -> NodeId {
    let xd = dims(b, x);
    let n = dims(b, w).last().copied().unwrap_or(0);
    if xd.len() <= 2 {
        return b.matmul(x, w);
    }
    let k = *xd.last().unwrap_or(&0);
    let m: usize = xd[..xd.len() - 1].iter().product();
    let x2 = b.reshape(x, &[m, k]);
    let y = b.matmul(x2, w);
    let mut out = xd[..xd.len() - 1].to_vec();
    out.push(n);
    b.reshape(y, &out)
}

/// `x @ w + b` over the last axis; `w` is `[in, out]` (JAX layout), `b` is `[out]`.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
    /// Whether there is a bias.
    pub bias: bool,
    /// Weight initializer (default Xavier uniform, as flax's `lecun`-style defaults are close).
    pub init: Init,
}

impl Linear {
    /// A layer with bias and Xavier-uniform weights.
    pub fn new(d_in: usize, d_out: usize) -> Self {
        Linear { d_in, d_out, bias: true, init: Init::XavierUniform }
    }

    /// With another weight initializer.
    pub fn with_init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }

    /// Without bias.
    pub fn no_bias(mut self) -> Self {
        self.bias = false;
        self
    }

    /// Applies the layer; params `w` and `b` under the current scope.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        if dims(b, x).last() != Some(&self.d_in) {
            let s = b.shape(x).map(|s| s.to_string()).unwrap_or_default();
            bad(b, "Linear", format!("expects {} input features, got {s}", self.d_in));
        }
        let w = b.param("w", &[self.d_in, self.d_out], self.init);
        let y = dense(b, x, w);
        if !self.bias {
            return y;
        }
        let bias = b.param("b", &[self.d_out], Init::Zeros);
        b.add(y, bias)
    }
}

/// A lookup table `[vocab, dim]` indexed by integer ids: output `ids.dims + [dim]`.
#[derive(Debug, Clone, Copy)]
pub struct Embedding {
    /// Number of rows.
    pub vocab: usize,
    /// Row width.
    pub dim: usize,
    /// Initializer (default normal 0.02).
    pub init: Init,
}

impl Embedding {
    /// A table with normal(0.02) rows.
    pub fn new(vocab: usize, dim: usize) -> Self {
        Embedding { vocab, dim, init: Init::Normal(0.02) }
    }

    /// The table param (`w`), declared (or reused) under the current scope.
    pub fn table(&self, b: &mut Builder) -> NodeId {
        b.param("w", &[self.vocab, self.dim], self.init)
    }

    /// Looks up `ids` (any integer dtype).
    pub fn apply(&self, b: &mut Builder, ids: NodeId) -> NodeId {
        let w = self.table(b);
        b.gather(w, ids, 0)
    }

    /// Logits against the table (a tied output head): `x @ w^T`.
    pub fn attend(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let w = self.table(b);
        let xd = dims(b, x);
        let m: usize = xd[..xd.len().saturating_sub(1)].iter().product();
        let x2 = b.reshape(x, &[m, self.dim]);
        let y = b.matmul_t(x2, w, false, true);
        let mut out = xd[..xd.len().saturating_sub(1)].to_vec();
        out.push(self.vocab);
        b.reshape(y, &out)
    }
}

/// Layer normalisation over the last axis with scale `g` (ones) and shift `b` (zeros).
#[derive(Debug, Clone, Copy)]
pub struct LayerNorm {
    /// Width of the last axis.
    pub dim: usize,
    /// Added to the variance.
    pub eps: f32,
}

impl LayerNorm {
    /// eps 1e-5.
    pub fn new(dim: usize) -> Self {
        LayerNorm { dim, eps: 1e-5 }
    }

    /// Applies it; params `g` and `b`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let g = b.param("g", &[self.dim], Init::Ones);
        let beta = b.param("b", &[self.dim], Init::Zeros);
        b.layer_norm(x, g, beta, self.eps)
    }
}

/// RMS normalisation over the last axis with scale `g` (ones).
#[derive(Debug, Clone, Copy)]
pub struct RmsNorm {
    /// Width of the last axis.
    pub dim: usize,
    /// Added to the mean square.
    pub eps: f32,
}

impl RmsNorm {
    /// eps 1e-6.
    pub fn new(dim: usize) -> Self {
        RmsNorm { dim, eps: 1e-6 }
    }

    /// Applies it; param `g`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let g = b.param("g", &[self.dim], Init::Ones);
        b.rms_norm(x, g, self.eps)
    }
}

/// An elementwise activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// max(x, 0).
    Relu,
    /// Exact GELU (erf).
    Gelu,
    /// GELU, tanh approximation (GPT-2, `jax.nn.gelu(approximate=True)`).
    GeluTanh,
    /// x * sigmoid(x).
    Silu,
    /// tanh.
    Tanh,
}

impl Activation {
    /// Applies it.
    pub fn apply(self, b: &mut Builder, x: NodeId) -> NodeId {
        match self {
            Activation::Relu => b.relu(x),
            Activation::Gelu => b.gelu(x),
            Activation::GeluTanh => b.gelu_tanh(x),
            Activation::Silu => b.silu(x),
            Activation::Tanh => b.tanh(x),
        }
    }
}

/// Two linear layers with an activation between: `fc` then `proj`.
#[derive(Debug, Clone, Copy)]
pub struct Mlp {
    /// Input and output width.
    pub dim: usize,
    /// Hidden width.
    pub hidden: usize,
    /// The activation.
    pub act: Activation,
    /// Initializer of both weights.
    pub init: Init,
    /// Initializer of the output weight, if different (GPT-2 scales it down).
    pub proj_init: Option<Init>,
}

impl Mlp {
    /// Xavier-uniform weights.
    pub fn new(dim: usize, hidden: usize, act: Activation) -> Self {
        Mlp { dim, hidden, act, init: Init::XavierUniform, proj_init: None }
    }

    /// Applies it; scopes `fc` and `proj`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let h = b.scoped("fc", |b| Linear::new(self.dim, self.hidden).with_init(self.init).apply(b, x));
        let h = self.act.apply(b, h);
        let pi = self.proj_init.unwrap_or(self.init);
        b.scoped("proj", |b| Linear::new(self.hidden, self.dim).with_init(pi).apply(b, h))
    }
}

/// The gated MLP of LLaMA-family models: `(silu(x W_gate) * (x W_up)) W_down`, no biases.
#[derive(Debug, Clone, Copy)]
pub struct SwiGlu {
    /// Input and output width.
    pub dim: usize,
    /// Hidden width.
    pub hidden: usize,
}

impl SwiGlu {
    /// Applies it; scopes `gate`, `up`, `down`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let g = b.scoped("gate", |b| Linear::new(self.dim, self.hidden).no_bias().apply(b, x));
        let u = b.scoped("up", |b| Linear::new(self.dim, self.hidden).no_bias().apply(b, x));
        let g = b.silu(g);
        let h = b.mul(g, u);
        b.scoped("down", |b| Linear::new(self.hidden, self.dim).no_bias().apply(b, h))
    }
}

/// Causal self-attention with `heads` query heads and `kv_heads` key/value heads (grouped
/// query when fewer): one fused `qkv` projection, the `attention` op, an output projection `o`.
#[derive(Debug, Clone, Copy)]
pub struct SelfAttention {
    /// Model width.
    pub dim: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Initializer of the qkv weight.
    pub init: Init,
    /// Initializer of the output weight.
    pub proj_init: Init,
    /// With biases (GPT-2) or without (LLaMA).
    pub bias: bool,
    /// Use the `attention` op (true) or matmul + additive causal mask + softmax + matmul.
    pub fused_op: bool,
}

impl SelfAttention {
    /// Multi-head attention (kv_heads = heads) with biases.
    pub fn new(dim: usize, heads: usize) -> Self {
        SelfAttention {
            dim,
            heads,
            kv_heads: heads,
            init: Init::XavierUniform,
            proj_init: Init::XavierUniform,
            bias: true,
            fused_op: false,
        }
    }

    /// Applies it to x `[batch, seq, dim]`; scopes `qkv` and `o`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let xd = dims(b, x);
        let (h, kv) = (self.heads, self.kv_heads);
        if xd.len() != 3
            || xd[2] != self.dim
            || h == 0
            || kv == 0
            || !h.is_multiple_of(kv)
            || !self.dim.is_multiple_of(h)
        {
            bad(
                b,
                "SelfAttention",
                format!(
                    "needs x [batch, seq, {}], heads ({h}) a multiple of kv_heads ({kv}) and dividing dim; x is {xd:?}",
                    self.dim
                ),
            );
            return x;
        }
        let (bs, t, hd) = (xd[0], xd[1], self.dim / h);
        let width = (h + 2 * kv) * hd;
        let lin = Linear { d_in: self.dim, d_out: width, bias: self.bias, init: self.init };
        let qkv = b.scoped("qkv", |b| lin.apply(b, x));
        let qkv = b.reshape(qkv, &[bs, t, h + 2 * kv, hd]);
        let qkv = b.transpose(qkv, &[0, 2, 1, 3]); // [bs, heads, t, hd]
        let q = b.slice_axis(qkv, 1, 0, h);
        let k = b.slice_axis(qkv, 1, h, h + kv);
        let v = b.slice_axis(qkv, 1, h + kv, h + 2 * kv);
        let scale = 1.0 / (hd as f32).sqrt();
        let a = if self.fused_op {
            b.attention(q, k, v, MaskKind::Causal, scale)
        } else {
            causal_attention(b, q, k, v, [bs, h, kv, t, hd], scale)
        };
        let a = b.transpose(a, &[0, 2, 1, 3]);
        let a = b.reshape(a, &[bs, t, self.dim]);
        let out = Linear { d_in: self.dim, d_out: self.dim, bias: self.bias, init: self.proj_init };
        b.scoped("o", |b| out.apply(b, a))
    }
}

/// `softmax(q k^T * scale + causal) v` from matmuls; query heads are grouped onto their kv head
/// by a reshape (`[b, kv, g*t, hd]`), so grouped-query attention needs no copy of k and v.
fn causal_attention(b: &mut Builder, q: NodeId, k: NodeId, v: NodeId, d: [usize; 5], scale: f32) -> NodeId {
    let [bs, h, kv, t, hd] = d;
    let grp = h / kv;
    let q = b.reshape(q, &[bs, kv, grp * t, hd]);
    let s = b.matmul_t(q, k, false, true);
    let sc = b.scalar(scale as f64, DType::F32);
    let s = b.mul(s, sc);
    let mask: Vec<f64> = (0..grp * t).flat_map(|r| (0..t).map(move |j| if j <= r % t { 0.0 } else { -1e30 })).collect();
    let m = HostTensor::from_f64(&[grp * t, t], DType::F32, &mask);
    let s = match m {
        Ok(m) => {
            let m = b.constant(m);
            b.add(s, m)
        }
        Err(e) => {
            b.record(e);
            s
        }
    };
    let p = b.softmax(s, -1);
    let a = b.matmul(p, v);
    b.reshape(a, &[bs, h, t, hd])
}

/// 2-D convolution, NCHW, kernel `[out, in, kh, kw]` (Kaiming uniform) and bias `[out]`.
#[derive(Debug, Clone, Copy)]
pub struct Conv2d {
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
}

impl Conv2d {
    /// Stride 1, "same" padding for odd kernels.
    pub fn new(c_in: usize, c_out: usize, k: usize) -> Self {
        Conv2d { c_in, c_out, kernel: [k, k], stride: [1, 1], padding: [k / 2, k / 2] }
    }

    /// Applies it; params `w`, `b`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let [kh, kw] = self.kernel;
        let w = b.param("w", &[self.c_out, self.c_in, kh, kw], Init::KaimingUniform);
        let y = b.conv2d(x, w, self.stride, self.padding, [1, 1], 1);
        let bias = b.param("b", &[self.c_out], Init::Zeros);
        let bias = b.reshape(bias, &[1, self.c_out, 1, 1]);
        b.add(y, bias)
    }
}

/// Max pooling over NCHW windows.
pub fn max_pool(b: &mut Builder, x: NodeId, k: usize, stride: usize) -> NodeId {
    b.max_pool2d(x, [k, k], [stride, stride], [0, 0])
}

/// Average pooling over NCHW windows.
pub fn avg_pool(b: &mut Builder, x: NodeId, k: usize, stride: usize) -> NodeId {
    b.avg_pool2d(x, [k, k], [stride, stride], [0, 0])
}

/// Mean over the spatial axes of NCHW: `[n, c]`.
pub fn global_avg_pool(b: &mut Builder, x: NodeId) -> NodeId {
    b.mean(x, &[2, 3], false)
}

/// Inverted dropout: in training mode zeroes each element with probability `rate` (from a
/// seeded noise input the training step refills every step) and scales the rest by
/// `1 / (1 - rate)`; outside training mode it is the identity.
pub fn dropout(b: &mut Builder, x: NodeId, rate: f64) -> NodeId {
    if !(0.0..1.0).contains(&rate) {
        bad(b, "dropout", format!("rate must be in [0, 1), got {rate}"));
        return x;
    }
    if !b.training || rate == 0.0 {
        return x;
    }
    let d = dims(b, x);
    let u = b.noise(&d);
    let r = b.scalar(rate, DType::F32);
    let keep = b.ge(u, r);
    let keep = b.cast(keep, DType::F32);
    let s = b.scalar(1.0 / (1.0 - rate), DType::F32);
    let keep = b.mul(keep, s);
    b.mul(x, keep)
}
