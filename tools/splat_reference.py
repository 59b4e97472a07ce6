"""Reference for rlx-splat: a straightforward numpy Gaussian-splatting renderer (every pixel
walks all Gaussians sorted by depth; no tiles) on a 64x64 scene of 20 Gaussians, written to
crates/rlx-splat/tests/fixtures/splat.json (inputs rounded to f32, the image in f64).

Conventions (as rlx-splat's splat_render): quaternions (w, x, y, z) normalized; opacity =
sigmoid(logit); camera x right, y down, looking down +z; pixel centers at i + 0.5; cov2d =
J W S W^T J^T + 0.3 I; radius = ceil(3 sqrt(lambda_max)); a Gaussian touches a pixel only when
the pixel's center lies within its radius on both axes; alpha = min(0.99, o exp(-d^T conic d / 2)),
skipped below 1/255; compositing stops before transmittance would drop below 1e-4.

Run: python3 tools/splat_reference.py
"""
import json
import math
import os

import numpy as np


def rotation(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def render(cam, bg, means, log_scales, quats, logits, colors):
    view = np.array(cam["view"]).reshape(4, 4)
    w_rot, trans = view[:3, :3], view[:3, 3]
    fx, fy, cx, cy = cam["fx"], cam["fy"], cam["cx"], cam["cy"]
    width, height = cam["width"], cam["height"]
    proj = []
    for i in range(len(logits)):
        t = w_rot @ means[i] + trans
        if t[2] <= cam["near"]:
            continue
        r = rotation(quats[i])
        m = r @ np.diag(np.exp(log_scales[i]))
        cov3 = m @ m.T
        z = t[2]
        j = np.array([[fx / z, 0, -fx * t[0] / z**2], [0, fy / z, -fy * t[1] / z**2]])
        cov2 = j @ w_rot @ cov3 @ w_rot.T @ j.T + 0.3 * np.eye(2)
        det = np.linalg.det(cov2)
        if det <= 0:
            continue
        conic = np.linalg.inv(cov2)
        mid = 0.5 * (cov2[0, 0] + cov2[1, 1])
        radius = math.ceil(3 * math.sqrt(mid + math.sqrt(max(0.1, mid * mid - det))))
        mean2 = np.array([fx * t[0] / z + cx, fy * t[1] / z + cy])
        opacity = 1 / (1 + math.exp(-logits[i]))
        proj.append((z, i, mean2, conic, radius, opacity))
    proj.sort(key=lambda p: (p[0], p[1]))
    img = np.zeros((height, width, 3))
    for py in range(height):
        for px in range(width):
            c = np.array([px + 0.5, py + 0.5])
            tt, col = 1.0, np.zeros(3)
            for _, i, mean2, conic, radius, opacity in proj:
                d = c - mean2
                if abs(d[0]) > radius or abs(d[1]) > radius:
                    continue
                power = -0.5 * d @ conic @ d
                if power > 0:
                    continue
                alpha = min(0.99, opacity * math.exp(power))
                if alpha < 1 / 255:
                    continue
                nxt = tt * (1 - alpha)
                if nxt < 1e-4:
                    break
                col += colors[i] * alpha * tt
                tt = nxt
            img[py, px] = col + tt * np.asarray(bg)
    return img


def look_rotation(yaw, pitch):
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    return rx @ ry


def main():
    rng = np.random.default_rng(40)
    n = 20
    f32 = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64)
    means = f32(rng.uniform(-1, 1, (n, 3)))
    log_scales = f32(np.log(rng.uniform(0.08, 0.35, (n, 3))))
    quats = f32(rng.normal(size=(n, 4)))
    logits = f32(rng.uniform(-1.0, 3.0, n))
    colors = f32(rng.uniform(0, 1, (n, 3)))
    view = np.eye(4)
    view[:3, :3] = look_rotation(0.35, -0.2)
    view[:3, 3] = [0.1, -0.05, 4.0]
    cam = {"view": [float(v) for v in f32(view).ravel()], "fx": 70.0, "fy": 66.0, "cx": 31.0, "cy": 33.5,
           "width": 64, "height": 64, "near": 0.01}
    bg = [0.1, 0.2, 0.3]
    img = render(cam, bg, means, log_scales, quats, logits, colors)
    out = {
        "camera": cam, "background": bg,
        "means": means.ravel().tolist(), "log_scales": log_scales.ravel().tolist(),
        "quats": quats.ravel().tolist(), "opacity_logits": logits.tolist(), "colors": colors.ravel().tolist(),
        "image": [float(f"{v:.12g}") for v in img.ravel()],
    }
    path = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-splat", "tests", "fixtures", "splat.json")
    with open(path, "w") as fh:
        json.dump(out, fh)
    covered = float(np.mean(np.any(np.abs(img - np.asarray(bg)) > 1e-3, axis=2)))
    print(f"wrote {path}: {n} Gaussians, {covered:.0%} of pixels covered, mean {img.mean():.4f}")


if __name__ == "__main__":
    main()
