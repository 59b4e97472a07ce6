//! The Mamba block (mamba_ssm's `mamba_simple.Mamba`, without the decoding cache): `in_proj` to
//! `(x, z)`, a causal depthwise conv1d and silu on `x`, `x_proj` to `(dt, B, C)`, `dt_proj`,
//! the `selective_scan` op (softplus on `dt + dt_proj.b`, the `D` skip, the `silu(z)` gate),
//! and `out_proj`. Input and output `[batch, len, d_model]`.

use crate::init::Init;
use crate::layers::dense;
use crate::module::Builder;
use rlx_ir::ops::SelectiveScan;
use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Error, NodeId, Shape};

/// A Mamba block's sizes (mamba's defaults: `d_state` 16, `d_conv` 4, `expand` 2,
/// `dt_rank = ceil(d_model / 16)`).
#[derive(Debug, Clone, Copy)]
pub struct Mamba {
    /// Model width (input and output features).
    pub d_model: usize,
    /// State size per channel.
    pub d_state: usize,
    /// Causal conv1d kernel length.
    pub d_conv: usize,
    /// Inner width over model width.
    pub expand: usize,
    /// Rank of the `dt` projection.
    pub dt_rank: usize,
}

impl Mamba {
    /// mamba's defaults for a model width.
    pub fn new(d_model: usize) -> Self {
        Mamba { d_model, d_state: 16, d_conv: 4, expand: 2, dt_rank: d_model.div_ceil(16) }
    }

    /// Channels of the scan (`expand * d_model`).
    pub fn d_inner(&self) -> usize {
        self.expand * self.d_model
    }

    /// Applies the block to `x` `[batch, len, d_model]`; params (under the current scope):
    /// `in_proj.w`, `conv.w` `[d_inner, d_conv]`, `conv.b`, `x_proj.w`, `dt_proj.w`, `dt_proj.b`,
    /// `A_log` `[d_inner, d_state]`, `D`, `out_proj.w`.
    pub fn apply(&self, b: &mut Builder, x: NodeId) -> NodeId {
        let xd = dims(b, x);
        let [nb, nl, dm] = xd[..] else {
            let reason = format!("Mamba `{}`: expects [batch, len, {}], got {xd:?}", b.full_name(""), self.d_model);
            let e = Error::InvalidGraph { graph: b.name().to_string(), reason };
            b.record(e);
            return x;
        };
        if dm != self.d_model {
            let reason = format!("Mamba `{}`: expects {} features, got {xd:?}", b.full_name(""), self.d_model);
            let e = Error::InvalidGraph { graph: b.name().to_string(), reason };
            b.record(e);
            return x;
        }
        let (di, ns, k, r) = (self.d_inner(), self.d_state, self.d_conv, self.dt_rank);
        // in_proj (no bias, as mamba's default) then channels-first [B, 2 d_inner, L].
        let w_in = b.scoped("in_proj", |b| b.param("w", &[dm, 2 * di], Init::XavierUniform));
        let xz = dense(b, x, w_in);
        let xz = b.transpose(xz, &[0, 2, 1]);
        let xs = b.slice_axis(xz, 1, 0, di);
        let z = b.slice_axis(xz, 1, di, 2 * di);
        // Causal depthwise conv1d: zeros on the left so step t sees t - k + 1 ..= t.
        let (cw, cb) = b.scoped("conv", |b| {
            let bound = 1.0 / (k as f64).sqrt();
            (b.param("w", &[di, k], Init::Uniform(-bound, bound)), b.param("b", &[di], Init::Uniform(-bound, bound)))
        });
        let pad = b.full(Shape::new(&[nb, di, k - 1], DType::F32), 0.0);
        let xp = b.concat(&[pad, xs], 2);
        let mut conv = b.reshape(cb, &[1, di, 1]);
        for j in 0..k {
            let win = b.slice_axis(xp, 2, j, j + nl);
            let wj = b.slice_axis(cw, 1, j, j + 1);
            let wj = b.reshape(wj, &[1, di, 1]);
            let t = b.mul(win, wj);
            conv = b.add(conv, t);
        }
        let u = b.silu(conv);
        // x_proj on [B L, d_inner] to (dt, B, C).
        let ut = b.transpose(u, &[0, 2, 1]);
        let w_x = b.scoped("x_proj", |b| b.param("w", &[di, r + 2 * ns], Init::XavierUniform));
        let dbc = dense(b, ut, w_x);
        let dt = b.slice_axis(dbc, 2, 0, r);
        let bm = b.slice_axis(dbc, 2, r, r + ns);
        let cm = b.slice_axis(dbc, 2, r + ns, r + 2 * ns);
        let bm = b.transpose(bm, &[0, 2, 1]);
        let cm = b.transpose(cm, &[0, 2, 1]);
        // dt_proj's weight here; its bias goes to the scan as delta_bias (inside the softplus).
        // mamba starts dt = softplus(bias) log-uniform in [1e-3, 1e-1]: the bias is drawn
        // uniform between the inverse softplus of those bounds.
        let (w_dt, dt_b) = b.scoped("dt_proj", |b| {
            let inv = |v: f64| v.exp_m1().ln();
            (
                b.param("w", &[r, di], Init::Uniform(-1.0 / (r as f64).sqrt(), 1.0 / (r as f64).sqrt())),
                b.param("b", &[di], Init::Uniform(inv(1e-3), inv(1e-1))),
            )
        });
        let delta = dense(b, dt, w_dt);
        let delta = b.transpose(delta, &[0, 2, 1]);
        // A = -exp(A_log); mamba's S4D-real start is A_log = log(1..=d_state) per channel,
        // approximated by a uniform draw over the same range.
        let a_log = b.param("A_log", &[di, ns], Init::Uniform(0.0, (ns as f64).ln()));
        let a = b.exp(a_log);
        let a = b.neg(a);
        let dskip = b.param("D", &[di], Init::Ones);
        let op = SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true };
        let y = b.selective_scan(op, &[u, delta, a, bm, cm, dskip, z, dt_b]);
        let y = b.transpose(y, &[0, 2, 1]);
        let w_out = b.scoped("out_proj", |b| b.param("w", &[di, dm], Init::XavierUniform));
        dense(b, y, w_out)
    }
}
