//! The rasterizer, in f64 for both dtypes: EWA projection of each Gaussian, one global sort by
//! (depth, index), tile lists taken from that order (so each tile's list is depth-sorted), and
//! front-to-back compositing per pixel; the backward replays a pixel's compositing and walks it
//! in reverse, then chains the 2-D gradients (mean, conic, opacity, color) back to the inputs.
//!
//! A Gaussian touches a pixel only when the pixel's center lies in its 3-sigma square: tiles
//! are then purely an acceleration, so the untiled reference (every pixel over the whole
//! sorted list) computes the same image operation for operation.

use crate::SplatError;
use crate::ops::{Camera, SplatRender};
use rlx_ir::custom::CustomOpDef;
use std::sync::Mutex;

/// Columns of the packed gradient: means 3, log-scales 3, quaternions 4, opacity 1, colors 3.
pub(crate) const PARAMS: usize = 14;
/// Added to the 2-D covariance's diagonal (the 3DGS low-pass filter).
const BLUR: f64 = 0.3;
/// Contributions below this alpha are skipped.
const MIN_ALPHA: f64 = 1.0 / 255.0;
/// Alpha is clamped here so transmittance never reaches zero.
const MAX_ALPHA: f64 = 0.99;
/// Compositing stops before the transmittance would fall below this.
const MIN_T: f64 = 1e-4;

/// The five scene inputs as flat f64 slices: means `[N,3]`, log-scales `[N,3]`, quaternions
/// `[N,4]` (w, x, y, z; any non-zero norm), opacity logits `[N]`, colors `[N,3]`.
#[derive(Debug, Clone, Copy)]
pub struct Scene<'a> {
    /// World-space centers.
    pub means: &'a [f64],
    /// Natural logs of the three axis scales.
    pub log_scales: &'a [f64],
    /// Rotations as quaternions (w, x, y, z), normalized inside.
    pub quats: &'a [f64],
    /// Opacities before the sigmoid.
    pub opacity_logits: &'a [f64],
    /// RGB colors.
    pub colors: &'a [f64],
}

impl Scene<'_> {
    /// The number of Gaussians.
    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One Gaussian after projection, with what the backward needs.
#[derive(Debug, Clone)]
struct Projected {
    index: usize,
    mean2d: [f64; 2],
    /// The inverse 2-D covariance (a, b, c): power = a dx^2 + 2 b dx dy + c dy^2.
    conic: [f64; 3],
    radius: f64,
    depth: f64,
    opacity: f64,
    /// Camera-space center.
    t: [f64; 3],
    cov3: [[f64; 3]; 3],
    rot: [[f64; 3]; 3],
    scale: [f64; 3],
    qn: [f64; 4],
    qnorm: f64,
    /// The projection's Jacobian times the view rotation (2x3).
    jw: [[f64; 3]; 2],
}

fn rotation(q: [f64; 4]) -> [[f64; 3]; 3] {
    let [w, x, y, z] = q;
    [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ]
}

fn view_parts(cam: &Camera) -> ([[f64; 3]; 3], [f64; 3]) {
    let v = &cam.view;
    ([[v[0], v[1], v[2]], [v[4], v[5], v[6]], [v[8], v[9], v[10]]], [v[3], v[7], v[11]])
}

/// Projects Gaussian `i`; None when it is behind the near plane or off the image.
fn project(op: &SplatRender, s: &Scene<'_>, i: usize) -> Result<Option<Projected>, SplatError> {
    let cam = &op.camera;
    let bad = |input: &str, what: &str| SplatError::Value {
        op: SplatRender::NAME.into(),
        input: input.into(),
        reason: format!("Gaussian {i}: {what}"),
    };
    let m = &s.means[3 * i..3 * i + 3];
    let ls = &s.log_scales[3 * i..3 * i + 3];
    let q = &s.quats[4 * i..4 * i + 4];
    let c = &s.colors[3 * i..3 * i + 3];
    for (name, v) in [("means", m), ("log_scales", ls), ("quats", q), ("colors", c)] {
        if v.iter().any(|x| !x.is_finite()) {
            return Err(bad(name, "is not finite"));
        }
    }
    if !s.opacity_logits[i].is_finite() {
        return Err(bad("opacity_logits", "is not finite"));
    }
    let qnorm = q.iter().map(|x| x * x).sum::<f64>().sqrt();
    if qnorm == 0.0 {
        return Err(bad("quats", "has zero norm"));
    }
    let (w, tr) = view_parts(cam);
    let t: [f64; 3] = std::array::from_fn(|r| (0..3).map(|k| w[r][k] * m[k]).sum::<f64>() + tr[r]);
    if t[2] <= cam.near {
        return Ok(None);
    }
    let qn = [q[0] / qnorm, q[1] / qnorm, q[2] / qnorm, q[3] / qnorm];
    let rot = rotation(qn);
    let scale = [ls[0].exp(), ls[1].exp(), ls[2].exp()];
    let cov3: [[f64; 3]; 3] = std::array::from_fn(|r| {
        std::array::from_fn(|col| (0..3).map(|k| rot[r][k] * scale[k] * scale[k] * rot[col][k]).sum())
    });
    let (z, z2) = (t[2], t[2] * t[2]);
    let j = [[cam.fx / z, 0.0, -cam.fx * t[0] / z2], [0.0, cam.fy / z, -cam.fy * t[1] / z2]];
    let jw: [[f64; 3]; 2] =
        std::array::from_fn(|r| std::array::from_fn(|col| (0..3).map(|k| j[r][k] * w[k][col]).sum()));
    let quad = |a: usize, b: usize| -> f64 {
        (0..3).map(|k| (0..3).map(|l| jw[a][k] * cov3[k][l] * jw[b][l]).sum::<f64>()).sum()
    };
    let (ca, cb, cc) = (quad(0, 0) + BLUR, quad(0, 1), quad(1, 1) + BLUR);
    let det = ca * cc - cb * cb;
    if det <= 0.0 || !det.is_finite() {
        return Ok(None);
    }
    let conic = [cc / det, -cb / det, ca / det];
    let mid = 0.5 * (ca + cc);
    let radius = (3.0 * (mid + (mid * mid - det).max(0.1).sqrt()).sqrt()).ceil();
    let mean2d = [cam.fx * t[0] / z + cam.cx, cam.fy * t[1] / z + cam.cy];
    let (wd, hd) = (cam.width as f64, cam.height as f64);
    // No pixel center (0.5 .. size - 0.5) lies in its square: nothing to draw.
    if mean2d[0] + radius < 0.5
        || mean2d[0] - radius > wd - 0.5
        || mean2d[1] + radius < 0.5
        || mean2d[1] - radius > hd - 0.5
    {
        return Ok(None);
    }
    let opacity = 1.0 / (1.0 + (-s.opacity_logits[i]).exp());
    Ok(Some(Projected { index: i, mean2d, conic, radius, depth: t[2], opacity, t, cov3, rot, scale, qn, qnorm, jw }))
}

/// Every drawable Gaussian, sorted front to back (ties by index, so the order is total).
fn project_all(op: &SplatRender, s: &Scene<'_>) -> Result<Vec<Projected>, SplatError> {
    let mut out = vec![];
    for i in 0..s.len() {
        if let Some(p) = project(op, s, i)? {
            out.push(p);
        }
    }
    out.sort_by(|a, b| a.depth.total_cmp(&b.depth).then(a.index.cmp(&b.index)));
    Ok(out)
}

/// One composited contribution to a pixel, for the backward.
struct Contrib {
    /// Position in the list the pixel walked.
    k: usize,
    alpha: f64,
    gval: f64,
    d: [f64; 2],
    clamped: bool,
    /// Transmittance before this contribution.
    t: f64,
}

/// Composites one pixel front to back over `list` (positions into `sorted`); returns the color
/// and the final transmittance, and records the contributions when asked.
fn shade(
    center: [f64; 2],
    list: &[usize],
    sorted: &[Projected],
    colors: &[f64],
    bg: [f64; 3],
    mut rec: Option<&mut Vec<Contrib>>,
) -> ([f64; 3], f64) {
    let mut tt = 1.0;
    let mut c = [0.0; 3];
    for (k, &p) in list.iter().enumerate() {
        let pr = &sorted[p];
        let d = [center[0] - pr.mean2d[0], center[1] - pr.mean2d[1]];
        if d[0].abs() > pr.radius || d[1].abs() > pr.radius {
            continue;
        }
        let [a, b, cc] = pr.conic;
        let power = -0.5 * (a * d[0] * d[0] + cc * d[1] * d[1]) - b * d[0] * d[1];
        if power > 0.0 {
            continue;
        }
        let gval = power.exp();
        let raw = pr.opacity * gval;
        let alpha = raw.min(MAX_ALPHA);
        if alpha < MIN_ALPHA {
            continue;
        }
        let next = tt * (1.0 - alpha);
        if next < MIN_T {
            break;
        }
        let col = &colors[3 * pr.index..3 * pr.index + 3];
        (0..3).for_each(|ch| c[ch] += col[ch] * alpha * tt);
        if let Some(r) = rec.as_deref_mut() {
            r.push(Contrib { k, alpha, gval, d, clamped: raw > MAX_ALPHA, t: tt });
        }
        tt = next;
    }
    (0..3).for_each(|ch| c[ch] += tt * bg[ch]);
    (c, tt)
}

/// 2-D gradients of one Gaussian: mean (2), conic (a, b, c), opacity, color (3).
type Grad2 = [f64; 9];

/// The reverse walk of one pixel: adds its gradients into `acc` (aligned with `list`).
#[allow(clippy::too_many_arguments)]
fn shade_backward(
    center: [f64; 2],
    list: &[usize],
    sorted: &[Projected],
    colors: &[f64],
    bg: [f64; 3],
    ct: [f64; 3],
    rec: &mut Vec<Contrib>,
    acc: &mut [Grad2],
) {
    rec.clear();
    let (_, t_final) = shade(center, list, sorted, colors, bg, Some(rec));
    // What lies behind the current contribution: later colors plus the background.
    let mut behind: [f64; 3] = std::array::from_fn(|ch| t_final * bg[ch]);
    for c in rec.iter().rev() {
        let pr = &sorted[list[c.k]];
        let col = &colors[3 * pr.index..3 * pr.index + 3];
        let g = &mut acc[c.k];
        let mut dalpha = 0.0;
        for ch in 0..3 {
            g[6 + ch] += ct[ch] * c.alpha * c.t;
            dalpha += ct[ch] * (col[ch] * c.t - behind[ch] / (1.0 - c.alpha));
            behind[ch] += col[ch] * c.alpha * c.t;
        }
        if c.clamped {
            continue;
        }
        g[5] += dalpha * c.gval;
        // d alpha / d power = opacity * G, where power = -0.5 d^T conic d.
        let dpow = dalpha * pr.opacity * c.gval;
        let [a, b, cc] = pr.conic;
        let [dx, dy] = c.d;
        g[2] += -0.5 * dpow * dx * dx;
        g[3] += -dpow * dx * dy;
        g[4] += -0.5 * dpow * dy * dy;
        // d = pixel - mean, so d power / d mean = +(conic d).
        g[0] += dpow * (a * dx + b * dy);
        g[1] += dpow * (b * dx + cc * dy);
    }
}

/// The tiles' lists: positions into `sorted` of the Gaussians whose square meets the tile.
fn tile_lists(op: &SplatRender, sorted: &[Projected]) -> (usize, usize, Vec<Vec<usize>>) {
    let (w, h, ts) = (op.camera.width, op.camera.height, op.tile_size);
    let (tw, th) = (w.div_ceil(ts), h.div_ceil(ts));
    let mut lists = vec![vec![]; tw * th];
    for (p, pr) in sorted.iter().enumerate() {
        // Tiles that may hold a pixel center within [m - r, m + r] (a superset: `shade` tests
        // each pixel, so an extra tile costs time, never a different image).
        let range = |m: f64, n: usize| {
            let lo = ((m - pr.radius) / ts as f64).floor().max(0.0) as usize;
            let hi = (((m + pr.radius) / ts as f64).floor() + 1.0).max(0.0) as usize;
            (lo.min(n), hi.min(n))
        };
        let ((x0, x1), (y0, y1)) = (range(pr.mean2d[0], tw), range(pr.mean2d[1], th));
        for ty in y0..y1 {
            for tx in x0..x1 {
                lists[ty * tw + tx].push(p);
            }
        }
    }
    (tw, th, lists)
}

/// Pixels of tile `tile` (row-major tiles of `ts`), clipped to the image.
fn tile_pixels(op: &SplatRender, tw: usize, tile: usize) -> impl Iterator<Item = (usize, usize)> {
    let (w, h, ts) = (op.camera.width, op.camera.height, op.tile_size);
    let (x0, y0) = ((tile % tw) * ts, (tile / tw) * ts);
    (y0..(y0 + ts).min(h)).flat_map(move |y| (x0..(x0 + ts).min(w)).map(move |x| (x, y)))
}

fn center(x: usize, y: usize) -> [f64; 2] {
    [x as f64 + 0.5, y as f64 + 0.5]
}

/// Renders `[H, W, 3]`: tiled over rlx-cpu's pool, or (`tiled` false) every pixel over the
/// whole sorted list, serially (the reference).
pub fn render(op: &SplatRender, s: &Scene<'_>, tiled: bool) -> Result<Vec<f64>, SplatError> {
    op.check_scene(s)?;
    let sorted = project_all(op, s)?;
    let (w, h) = (op.camera.width, op.camera.height);
    let mut img = vec![0.0; w * h * 3];
    if !tiled {
        let all: Vec<usize> = (0..sorted.len()).collect();
        for y in 0..h {
            for x in 0..w {
                let (c, _) = shade(center(x, y), &all, &sorted, s.colors, op.background, None);
                img[(y * w + x) * 3..][..3].copy_from_slice(&c);
            }
        }
        return Ok(img);
    }
    let (tw, _, lists) = tile_lists(op, &sorted);
    // Each tile fills its own slot; the copy into the image is serial and cheap.
    let slots: Vec<Mutex<Vec<f64>>> = (0..lists.len()).map(|_| Mutex::new(vec![])).collect();
    rlx_cpu::threads::parallel_for_dynamic(lists.len(), &|tile| {
        let out: Vec<f64> = tile_pixels(op, tw, tile)
            .flat_map(|(x, y)| shade(center(x, y), &lists[tile], &sorted, s.colors, op.background, None).0)
            .collect();
        *slots[tile].lock().unwrap_or_else(|p| p.into_inner()) = out;
    });
    for (tile, slot) in slots.into_iter().enumerate() {
        let vals = slot.into_inner().unwrap_or_else(|p| p.into_inner());
        for ((x, y), c) in tile_pixels(op, tw, tile).zip(vals.chunks(3)) {
            img[(y * w + x) * 3..][..3].copy_from_slice(c);
        }
    }
    Ok(img)
}

/// The gradient of `sum(ct * render(s))` with respect to every input, packed `[N, 14]`
/// (means, log-scales, quaternions, opacity logits, colors); tiled and threaded, or serial over
/// the whole list when `tiled` is false.
pub fn backward(op: &SplatRender, s: &Scene<'_>, ct: &[f64], tiled: bool) -> Result<Vec<f64>, SplatError> {
    op.check_scene(s)?;
    let (w, h) = (op.camera.width, op.camera.height);
    if ct.len() != w * h * 3 {
        return Err(SplatError::Shape {
            op: crate::SplatRenderGrad::NAME.into(),
            input: "cotangent".into(),
            reason: format!("has {} values, the image {h}x{w}x3 needs {}", ct.len(), w * h * 3),
        });
    }
    let sorted = project_all(op, s)?;
    let ct_at = |x: usize, y: usize| -> [f64; 3] { std::array::from_fn(|ch| ct[(y * w + x) * 3 + ch]) };
    let mut g2 = vec![[0.0; 9]; sorted.len()];
    if !tiled {
        let all: Vec<usize> = (0..sorted.len()).collect();
        let mut rec = vec![];
        for y in 0..h {
            for x in 0..w {
                shade_backward(center(x, y), &all, &sorted, s.colors, op.background, ct_at(x, y), &mut rec, &mut g2);
            }
        }
    } else {
        let (tw, _, lists) = tile_lists(op, &sorted);
        let slots: Vec<Mutex<Vec<Grad2>>> = (0..lists.len()).map(|_| Mutex::new(vec![])).collect();
        rlx_cpu::threads::parallel_for_dynamic(lists.len(), &|tile| {
            let list = &lists[tile];
            let mut acc = vec![[0.0; 9]; list.len()];
            let mut rec = vec![];
            for (x, y) in tile_pixels(op, tw, tile) {
                shade_backward(center(x, y), list, &sorted, s.colors, op.background, ct_at(x, y), &mut rec, &mut acc);
            }
            *slots[tile].lock().unwrap_or_else(|p| p.into_inner()) = acc;
        });
        // Summed in tile order, so the result does not depend on the threads' timing.
        for (list, slot) in lists.iter().zip(slots) {
            for (&p, g) in list.iter().zip(slot.into_inner().unwrap_or_else(|p| p.into_inner())) {
                (0..9).for_each(|k| g2[p][k] += g[k]);
            }
        }
    }
    let mut out = vec![0.0; s.len() * PARAMS];
    for (pr, g) in sorted.iter().zip(&g2) {
        chain(op, pr, g, &mut out[pr.index * PARAMS..][..PARAMS]);
    }
    Ok(out)
}

fn mat3(f: impl Fn(usize, usize) -> f64) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| f(r, c)))
}

/// Chains one Gaussian's 2-D gradients back to its inputs.
fn chain(op: &SplatRender, pr: &Projected, g: &Grad2, out: &mut [f64]) {
    let cam = &op.camera;
    let [a, b, c] = pr.conic;
    // The conic's gradient as a symmetric matrix: power uses b twice (b dx dy + b dy dx).
    let conic = [[a, b], [b, c]];
    let gm = [[g[2], 0.5 * g[3]], [0.5 * g[3], g[4]]];
    // d cov2d = -conic gm conic (the inverse's derivative).
    let dcov2: [[f64; 2]; 2] = std::array::from_fn(|r| {
        std::array::from_fn(|col| {
            -(0..2).map(|k| (0..2).map(|l| conic[r][k] * gm[k][l] * conic[l][col]).sum::<f64>()).sum::<f64>()
        })
    });
    let jw = &pr.jw;
    // cov2d = JW cov3 (JW)^T + blur: d cov3 = (JW)^T d JW, d (JW) = 2 dcov2 JW cov3.
    let dcov3 = mat3(|r, col| (0..2).map(|k| (0..2).map(|l| jw[k][r] * dcov2[k][l] * jw[l][col]).sum::<f64>()).sum());
    let djw: [[f64; 3]; 2] = std::array::from_fn(|r| {
        std::array::from_fn(|col| {
            2.0 * (0..2).map(|k| (0..3).map(|l| dcov2[r][k] * jw[k][l] * pr.cov3[l][col]).sum::<f64>()).sum::<f64>()
        })
    });
    let (w, _) = view_parts(cam);
    // JW = J W: dJ = d(JW) W^T.
    let dj: [[f64; 3]; 2] =
        std::array::from_fn(|r| std::array::from_fn(|col| (0..3).map(|k| djw[r][k] * w[col][k]).sum()));
    let [tx, ty, tz] = pr.t;
    let (fx, fy) = (cam.fx, cam.fy);
    let (z2, z3) = (tz * tz, tz * tz * tz);
    let mut dt = [0.0; 3];
    dt[0] += dj[0][2] * (-fx / z2) + g[0] * fx / tz;
    dt[1] += dj[1][2] * (-fy / z2) + g[1] * fy / tz;
    dt[2] += dj[0][0] * (-fx / z2)
        + dj[0][2] * (2.0 * fx * tx / z3)
        + dj[1][1] * (-fy / z2)
        + dj[1][2] * (2.0 * fy * ty / z3)
        - g[0] * fx * tx / z2
        - g[1] * fy * ty / z2;
    // t = W m + translation.
    for k in 0..3 {
        out[k] = (0..3).map(|r| w[r][k] * dt[r]).sum();
    }
    // cov3 = M M^T with M = R diag(s): dM = 2 dcov3 M.
    let (rot, s) = (&pr.rot, &pr.scale);
    let mm = mat3(|r, col| rot[r][col] * s[col]);
    let dm = mat3(|r, col| 2.0 * (0..3).map(|k| dcov3[r][k] * mm[k][col]).sum::<f64>());
    for j in 0..3 {
        let ds: f64 = (0..3).map(|i| rot[i][j] * dm[i][j]).sum();
        out[3 + j] = ds * s[j];
    }
    let gr = mat3(|r, col| dm[r][col] * s[col]);
    let [qw, qx, qy, qz] = pr.qn;
    let dqn = [
        2.0 * (-qz * gr[0][1] + qy * gr[0][2] + qz * gr[1][0] - qx * gr[1][2] - qy * gr[2][0] + qx * gr[2][1]),
        2.0 * (qy * gr[0][1] + qz * gr[0][2] + qy * gr[1][0] - 2.0 * qx * gr[1][1] - qw * gr[1][2]
            + qz * gr[2][0]
            + qw * gr[2][1]
            - 2.0 * qx * gr[2][2]),
        2.0 * (-2.0 * qy * gr[0][0] + qx * gr[0][1] + qw * gr[0][2] + qx * gr[1][0] + qz * gr[1][2] - qw * gr[2][0]
            + qz * gr[2][1]
            - 2.0 * qy * gr[2][2]),
        2.0 * (-2.0 * qz * gr[0][0] - qw * gr[0][1] + qx * gr[0][2] + qw * gr[1][0] - 2.0 * qz * gr[1][1]
            + qy * gr[1][2]
            + qx * gr[2][0]
            + qy * gr[2][1]),
    ];
    // Through the normalization: the component along q vanishes.
    let along: f64 = (0..4).map(|k| pr.qn[k] * dqn[k]).sum();
    for k in 0..4 {
        out[6 + k] = (dqn[k] - pr.qn[k] * along) / pr.qnorm;
    }
    out[10] = g[5] * pr.opacity * (1.0 - pr.opacity);
    out[11..14].copy_from_slice(&g[6..9]);
}
