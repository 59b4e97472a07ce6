//! The two ops: `splat_render` (scene -> image) and `splat_render_grad` (scene and the image's
//! cotangent -> every input's gradient, packed), the first's VJP. Their references are the
//! untiled serial rasterizer; the CPU kernels are the tiled, threaded one.

use crate::SplatError;
use crate::raster::{self, PARAMS, Scene};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// A pinhole camera: `view` maps world to camera coordinates (row-major 4x4, camera looking
/// down +z, x right, y down, as OpenCV and gsplat); pixel = (fx x / z + cx, fy y / z + cy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Camera {
    /// World-to-camera transform, row-major; the last row is ignored (taken as 0 0 0 1).
    pub view: [f64; 16],
    /// Focal length in pixels, x.
    pub fx: f64,
    /// Focal length in pixels, y.
    pub fy: f64,
    /// Principal point, x (pixels; pixel centers sit at i + 0.5).
    pub cx: f64,
    /// Principal point, y.
    pub cy: f64,
    /// Image width in pixels.
    pub width: usize,
    /// Image height in pixels.
    pub height: usize,
    /// Gaussians whose camera-space depth is at most this are dropped.
    pub near: f64,
}

impl Camera {
    /// A camera at `(0, 0, -distance)` looking at the origin (no rotation), focal length
    /// `focal`, principal point at the image's center.
    pub fn pinhole(width: usize, height: usize, focal: f64, distance: f64) -> Camera {
        let mut view = [0.0; 16];
        (0..4).for_each(|i| view[i * 5] = 1.0);
        view[11] = distance;
        Camera {
            view,
            fx: focal,
            fy: focal,
            cx: width as f64 / 2.0,
            cy: height as f64 / 2.0,
            width,
            height,
            near: 0.01,
        }
    }
}

/// Renders N Gaussians to an `[height, width, 3]` image. Inputs (one float dtype): means
/// `[N,3]`, log-scales `[N,3]`, quaternions `[N,4]` (w, x, y, z; normalized inside), opacity
/// logits `[N]` (sigmoid inside), colors `[N,3]`. Forward as 3DGS / gsplat: EWA projection with
/// a 0.3 px blur, 3-sigma squares, tile binning, depth sort, front-to-back compositing over
/// `background`. Differentiable in every input (first order) through `splat_render_grad`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplatRender {
    /// The camera.
    pub camera: Camera,
    /// The color behind every Gaussian.
    pub background: [f64; 3],
    /// Tile edge in pixels (16 in 3DGS); changes speed only, never the image.
    pub tile_size: usize,
}

/// The gradient of `sum(cotangent * splat_render(scene))` wrt every scene input, packed `[N, 14]`:
/// columns 0..3 means, 3..6 log-scales, 6..10 quaternions, 10 opacity logits, 11..14 colors.
/// Inputs: the five scene inputs, then the cotangent `[height, width, 3]`. Not differentiable
/// itself (no second order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplatRenderGrad {
    /// The forward op's attributes.
    pub render: SplatRender,
}

impl CustomOpDef for SplatRender {
    const NAME: &'static str = "splat_render";
}

impl CustomOpDef for SplatRenderGrad {
    const NAME: &'static str = "splat_render_grad";
}

/// The scene inputs' names and their trailing dimension (0 = none: `[N]`).
pub(crate) const INPUTS: [(&str, usize); 5] =
    [("means", 3), ("log_scales", 3), ("quats", 4), ("opacity_logits", 0), ("colors", 3)];

impl SplatRender {
    /// A renderer for `camera` over a black background, tile size 16.
    pub fn new(camera: Camera) -> SplatRender {
        SplatRender { camera, background: [0.0; 3], tile_size: 16 }
    }

    /// Checks the attributes.
    pub fn validate(&self) -> std::result::Result<(), SplatError> {
        let c = &self.camera;
        let bad = |reason: String| Err(SplatError::Attr { op: Self::NAME.into(), reason });
        if c.width == 0 || c.height == 0 {
            return bad(format!("the image must be non-empty, got {}x{}", c.width, c.height));
        }
        if self.tile_size == 0 {
            return bad("tile_size must be positive".into());
        }
        if !(c.fx > 0.0 && c.fy > 0.0 && c.fx.is_finite() && c.fy.is_finite()) {
            return bad(format!("focal lengths must be positive and finite, got fx {} fy {}", c.fx, c.fy));
        }
        if !(c.near > 0.0 && c.near.is_finite()) {
            return bad(format!("near must be positive and finite, got {}", c.near));
        }
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        if !finite(&c.view) || !finite(&[c.cx, c.cy]) || !finite(&self.background) {
            return bad("view, principal point and background must be finite".into());
        }
        Ok(())
    }

    /// Checks the attributes and that the scene's arrays agree on N.
    pub fn check_scene(&self, s: &Scene<'_>) -> std::result::Result<(), SplatError> {
        self.validate()?;
        let n = s.len();
        let arrays = [s.means, s.log_scales, s.quats, s.opacity_logits, s.colors];
        for ((name, k), a) in INPUTS.iter().zip(arrays) {
            if a.len() != n * k.max(&1) {
                return Err(SplatError::Shape {
                    op: Self::NAME.into(),
                    input: (*name).into(),
                    reason: format!("has {} values, {n} Gaussians need {}", a.len(), n * k.max(&1)),
                });
            }
        }
        Ok(())
    }

    /// Checks the five scene input types; returns N and the dtype.
    fn infer_scene(&self, op: &str, ins: &[&Shape]) -> std::result::Result<(usize, DType), String> {
        self.validate().map_err(|e| e.to_string())?;
        let dt = ins[0].dtype;
        if !matches!(dt, DType::F32 | DType::F64) {
            return Err(format!("{op}: means must be f32 or f64, got {}", ins[0]));
        }
        let n = ins[3].dims_fixed()?.first().copied().unwrap_or(0);
        for ((name, k), s) in INPUTS.iter().zip(ins) {
            let want = if *k == 0 { vec![n] } else { vec![n, *k] };
            if s.dtype != dt || s.dims_fixed()? != want {
                let w = want.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
                return Err(format!("{op}: {name} must be {dt}[{w}] (N from opacity_logits), got {s}"));
            }
        }
        Ok((n, dt))
    }

    fn image_dims(&self) -> [usize; 3] {
        [self.camera.height, self.camera.width, 3]
    }
}

/// The scene inputs of a reference call, as f64 vectors.
fn scene_data(op: &str, ins: &[&HostTensor]) -> Result<Vec<Vec<f64>>> {
    ins.iter()
        .take(5)
        .map(|t| match &t.data {
            Data::F(v) => Ok(v.clone()),
            _ => Err(Error::eval(op, "needs float tensors")),
        })
        .collect()
}

/// Borrows five vectors as a scene.
pub(crate) fn scene_of(v: &[impl AsRef<[f64]>]) -> Scene<'_> {
    Scene {
        means: v[0].as_ref(),
        log_scales: v[1].as_ref(),
        quats: v[2].as_ref(),
        opacity_logits: v[3].as_ref(),
        colors: v[4].as_ref(),
    }
}

fn output(out: &Shape, v: Vec<f64>) -> Result<HostTensor> {
    let mut t = HostTensor::new(out.clone(), Data::F(v))?;
    t.round_in_place();
    Ok(t)
}

impl OpDef for SplatRender {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (_, dt) = self.infer_scene(Self::NAME, ins)?;
        Ok(Shape::new(&self.image_dims(), dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let v = scene_data(Self::NAME, ins)?;
        output(out, raster::render(self, &scene_of(&v), false)?)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let n = g.shape(ins[3])?.dims_fixed().ok()?[0];
        let mut args = ins.to_vec();
        args.push(ct);
        let packed = g.custom(SplatRenderGrad { render: self.clone() }, &args);
        let mut start = 0;
        let mut grads = vec![];
        for (_, k) in INPUTS {
            let end = start + k.max(1);
            let s = g.slice_axis(packed, 1, start, end);
            grads.push(Some(if k == 0 { g.reshape(s, &[n]) } else { s }));
            start = end;
        }
        Some(grads)
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, n, seed, tile) in [(DType::F64, 6, 3, 8), (DType::F32, 5, 4, 16)] {
            let (op, scene) = sample_scene(n, seed, tile);
            let ins = scene_tensors(&scene, n, dt);
            out.push(Sample::new(format!("splat_render/{dt}/n{n}"), rlx_ir::custom::op(op), ins));
        }
        out
    }
}

impl OpDef for SplatRenderGrad {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(6)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (n, dt) = self.render.infer_scene(Self::NAME, ins)?;
        let want = self.render.image_dims();
        if ins[5].dtype != dt || ins[5].dims_fixed()? != want {
            return Err(format!(
                "{}: the cotangent must be {dt}[{},{},3], got {}",
                Self::NAME,
                want[0],
                want[1],
                ins[5]
            ));
        }
        Ok(Shape::new(&[n, PARAMS], dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let v = scene_data(Self::NAME, ins)?;
        let ct = ins[5].to_f64_vec()?;
        output(out, raster::backward(&self.render, &scene_of(&v), &ct, false)?)
    }
    fn samples() -> Vec<Sample> {
        let (op, scene) = sample_scene(5, 6, 8);
        let mut ins = scene_tensors(&scene, 5, DType::F64);
        let d = op.image_dims();
        let ct = rand_f64(d.iter().product(), -1.0, 1.0, 9);
        ins.push(HostTensor::from_f64(&d, DType::F64, &ct).expect("sample"));
        vec![Sample::new("splat_render_grad/f64/n5", rlx_ir::custom::op(SplatRenderGrad { render: op }), ins)]
    }
}

/// A small scene for samples: `n` Gaussians in front of a 20x14 camera, on a grey background.
fn sample_scene(n: usize, seed: u64, tile: usize) -> (SplatRender, Vec<Vec<f64>>) {
    let op = SplatRender { camera: Camera::pinhole(20, 14, 18.0, 4.0), background: [0.2, 0.3, 0.1], tile_size: tile };
    (op, crate::random_scene(n, seed, 1.0))
}

fn scene_tensors(scene: &[Vec<f64>], n: usize, dt: DType) -> Vec<HostTensor> {
    INPUTS
        .iter()
        .zip(scene)
        .map(|((_, k), v)| {
            let dims = if *k == 0 { vec![n] } else { vec![n, *k] };
            HostTensor::from_f64(&dims, dt, v).expect("sample")
        })
        .collect()
}
