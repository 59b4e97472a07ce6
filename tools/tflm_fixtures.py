"""TFLite Micro reference fixtures for rlx-cortexm's kernels.

Builds one-op int8 TFLite models (fully connected, conv2d, depthwise conv2d, average / max pool,
ReLU, ReLU6, add, softmax) with random shapes, int8 inputs, weights and float scales (so random
Q31 multipliers and shifts), runs each through TFLite Micro's interpreter (its reference kernels
on x86) and writes inputs, parameters and outputs to crates/rlx-cortexm/tests/fixtures/tflm.json.
The Rust test `tests/tflm.rs` derives the kernel parameters from the same float scales and must
reproduce every output bit for bit, so the test itself needs no Python.

    python3 -m venv /tmp/tflm && /tmp/tflm/bin/pip install tflite-micro
    /tmp/tflm/bin/python tools/tflm_fixtures.py
"""

import json
import os
import sys

import numpy as np
from tflite_micro.python.tflite_micro import runtime
from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-cortexm", "tests", "fixtures", "tflm.json")
rng = np.random.default_rng(41)
ACT = {"none": tfl.ActivationFunctionType.NONE, "relu": tfl.ActivationFunctionType.RELU,
       "relu6": tfl.ActivationFunctionType.RELU6}


def f32(x):
    """A float32 scale, kept exactly through JSON (shortest repr round-trips)."""
    return float(np.float32(x))


def rand_scale(lo=-9.0, hi=-2.0):
    return f32(2.0 ** rng.uniform(lo, hi))


def i8(shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def qt(shape, scale, zp, data=None, dtype=tfl.TensorType.INT8, axis=None):
    q = me.Quantization(scales=scale, zero_points=zp, axis=axis)
    return me.Tensor(shape=shape, dtype=dtype, data=data, quantization=q)


def run(opcode, options_type, options, inputs, output, feeds):
    op = me.Operator(opcode=opcode, inputs=inputs, outputs=[output])
    if options is not None:
        op._fb.builtinOptionsType = options_type
        op._fb.builtinOptions = options
    model = me.Model()
    graph_inputs = [t for t in inputs if t is not None and t.buffer is None]
    model.add_subgraph(operators=[op], inputs=graph_inputs, outputs=[output])
    interp = runtime.Interpreter.from_bytes(bytes(model.build()), arena_size=1 << 20)
    for i, x in enumerate(feeds):
        interp.set_input(x, i)
    interp.invoke()
    return interp.get_output(0)


def same_pad(size, k, stride, dilation):
    out = -(-size // stride)
    eff = (k - 1) * dilation + 1
    return out, max((out - 1) * stride + eff - size, 0) // 2


def valid_out(size, k, stride, dilation):
    return (size - ((k - 1) * dilation + 1)) // stride + 1


def conv_like(depthwise):
    n, h, w, c = 1, int(rng.integers(3, 9)), int(rng.integers(3, 9)), int(rng.integers(1, 6))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    dh, dw = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if rng.random() < 0.3 else (1, 1)
    padding = "same" if rng.random() < 0.5 else "valid"
    if padding == "same":
        (oh, ph), (ow, pw) = same_pad(h, kh, sh, dh), same_pad(w, kw, sw, dw)
    else:
        oh, ow, ph, pw = valid_out(h, kh, sh, dh), valid_out(w, kw, sw, dw), 0, 0
    if oh < 1 or ow < 1:
        return conv_like(depthwise)
    mult = int(rng.integers(1, 3)) if depthwise else 1
    oc = c * mult if depthwise else int(rng.integers(1, 7))
    s_in, zp_in = rand_scale(), int(rng.integers(-128, 128))
    s_w = [rand_scale(-9, -4) for _ in range(oc)]
    s_out, zp_out = f32(s_in * np.mean(s_w) * 2.0 ** rng.uniform(7, 12)), int(rng.integers(-128, 128))
    act = str(rng.choice(["none", "relu", "relu6"]))
    wshape = (1, kh, kw, oc) if depthwise else (oc, kh, kw, c)
    wq = i8(wshape)
    wq[wq == -128] = -127  # symmetric weights
    bias = rng.integers(-20000, 20000, size=oc, dtype=np.int32)
    x = i8((n, h, w, c))
    if depthwise:
        opts = tfl.DepthwiseConv2DOptionsT()
        opts.depthMultiplier = mult
        code, otype, axis = tfl.BuiltinOperator.DEPTHWISE_CONV_2D, tfl.BuiltinOptions.DepthwiseConv2DOptions, 3
    else:
        opts = tfl.Conv2DOptionsT()
        code, otype, axis = tfl.BuiltinOperator.CONV_2D, tfl.BuiltinOptions.Conv2DOptions, 0
    opts.padding = tfl.Padding.SAME if padding == "same" else tfl.Padding.VALID
    opts.strideH, opts.strideW, opts.dilationHFactor, opts.dilationWFactor = sh, sw, dh, dw
    opts.fusedActivationFunction = ACT[act]
    tin = qt((n, h, w, c), s_in, zp_in)
    tw = qt(wshape, s_w, [0] * oc, data=wq, axis=axis)
    tb = qt((oc,), [f32(s_in * s) for s in s_w], [0] * oc, data=bias, dtype=tfl.TensorType.INT32, axis=0)
    tout = qt((n, oh, ow, oc), s_out, zp_out)
    y = run(code, otype, opts, [tin, tw, tb], tout, [x])
    return {"op": "depthwise_conv2d" if depthwise else "conv2d", "input_shape": [n, h, w, c],
            "output_shape": [n, oh, ow, oc], "kernel": [kh, kw], "stride": [sh, sw], "dilation": [dh, dw],
            "pad": [ph, pw], "multiplier": mult, "s_in": s_in, "zp_in": zp_in, "s_w": s_w, "s_out": s_out,
            "zp_out": zp_out, "act": act, "weights": wq.flatten().tolist(), "bias": bias.tolist(),
            "input": x.flatten().tolist(), "output": y.flatten().tolist()}


def fully_connected(sweep=False):
    """With `sweep`, a requantization sweep: 64 rows and weight scales spread over 2^-22 .. 2^4
    relative to the output's, so the multipliers cover right shifts of 0..22 and left shifts."""
    batch, nin, nout = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 20))
    if sweep:
        batch, nin, nout = 64, int(rng.integers(1, 9)), 32
    per_channel = sweep or (nout > 1 and rng.random() < 0.7)
    s_in, zp_in = rand_scale(), int(rng.integers(-128, 128))
    s_w = [rand_scale(-9, -4) for _ in range(nout if per_channel else 1)]
    s_out = f32(s_in * np.mean(s_w) * 2.0 ** rng.uniform(7, 12))
    if sweep:
        s_w = [f32(s_out / s_in * 2.0 ** rng.uniform(-22, 4)) for _ in range(nout)]
    zp_out = int(rng.integers(-128, 128))
    act = str(rng.choice(["none", "relu", "relu6"]))
    wq = i8((nout, nin))
    wq[wq == -128] = -127
    bias = rng.integers(-20000, 20000, size=nout, dtype=np.int32)
    x = i8((batch, nin))
    opts = tfl.FullyConnectedOptionsT()
    opts.fusedActivationFunction = ACT[act]
    tin = qt((batch, nin), s_in, zp_in)
    tw = qt((nout, nin), s_w, [0] * len(s_w), data=wq, axis=0 if per_channel else None)
    bs = [f32(s_in * s) for s in s_w]
    tb = qt((nout,), bs, [0] * len(bs), data=bias, dtype=tfl.TensorType.INT32, axis=0 if per_channel else None)
    tout = qt((batch, nout), s_out, zp_out)
    y = run(tfl.BuiltinOperator.FULLY_CONNECTED, tfl.BuiltinOptions.FullyConnectedOptions, opts, [tin, tw, tb],
            tout, [x])
    return {"op": "fully_connected", "sweep": sweep, "batch": batch, "inputs": nin, "outputs": nout, "s_in": s_in, "zp_in": zp_in,
            "s_w": s_w, "s_out": s_out, "zp_out": zp_out, "act": act, "weights": wq.flatten().tolist(),
            "bias": bias.tolist(), "input": x.flatten().tolist(), "output": y.flatten().tolist()}


def pool(kind):
    n, h, w, c = 1, int(rng.integers(2, 9)), int(rng.integers(2, 9)), int(rng.integers(1, 5))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    padding = "same" if rng.random() < 0.5 else "valid"
    if padding == "same":
        (oh, ph), (ow, pw) = same_pad(h, kh, sh, 1), same_pad(w, kw, sw, 1)
    else:
        oh, ow, ph, pw = valid_out(h, kh, sh, 1), valid_out(w, kw, sw, 1), 0, 0
    if oh < 1 or ow < 1:
        return pool(kind)
    s, zp = rand_scale(-8, -2), int(rng.integers(-128, 128))
    act = str(rng.choice(["none", "relu"]))
    opts = tfl.Pool2DOptionsT()
    opts.padding = tfl.Padding.SAME if padding == "same" else tfl.Padding.VALID
    opts.strideH, opts.strideW, opts.filterHeight, opts.filterWidth = sh, sw, kh, kw
    opts.fusedActivationFunction = ACT[act]
    x = i8((n, h, w, c))
    code = tfl.BuiltinOperator.AVERAGE_POOL_2D if kind == "avg" else tfl.BuiltinOperator.MAX_POOL_2D
    y = run(code, tfl.BuiltinOptions.Pool2DOptions, opts, [qt((n, h, w, c), s, zp)], qt((n, oh, ow, c), s, zp), [x])
    return {"op": f"{kind}_pool2d", "input_shape": [n, h, w, c], "output_shape": [n, oh, ow, c], "kernel": [kh, kw],
            "stride": [sh, sw], "pad": [ph, pw], "s": s, "zp": zp, "act": act, "input": x.flatten().tolist(),
            "output": y.flatten().tolist()}


def relu(six):
    shape = (2, int(rng.integers(1, 40)))
    s_in, zp_in = rand_scale(-8, -1), int(rng.integers(-128, 128))
    s_out, zp_out = (s_in, zp_in) if six else (rand_scale(-8, -1), int(rng.integers(-128, 128)))
    x = i8(shape)
    code = tfl.BuiltinOperator.RELU6 if six else tfl.BuiltinOperator.RELU
    y = run(code, None, None, [qt(shape, s_in, zp_in)], qt(shape, s_out, zp_out), [x])
    return {"op": "relu6" if six else "relu", "s_in": s_in, "zp_in": zp_in, "s_out": s_out, "zp_out": zp_out,
            "input": x.flatten().tolist(), "output": y.flatten().tolist()}


def add():
    shape = (1, int(rng.integers(1, 50)))
    s1, s2 = rand_scale(-8, -1), rand_scale(-8, -1)
    so = f32(max(s1, s2) * 2.0 ** rng.uniform(0, 1.5))
    z1, z2, zo = (int(rng.integers(-128, 128)) for _ in range(3))
    act = str(rng.choice(["none", "relu"]))
    opts = tfl.AddOptionsT()
    opts.fusedActivationFunction = ACT[act]
    a, b = i8(shape), i8(shape)
    y = run(tfl.BuiltinOperator.ADD, tfl.BuiltinOptions.AddOptions, opts, [qt(shape, s1, z1), qt(shape, s2, z2)],
            qt(shape, so, zo), [a, b])
    return {"op": "add", "s1": s1, "zp1": z1, "s2": s2, "zp2": z2, "s_out": so, "zp_out": zo, "act": act,
            "input": a.flatten().tolist(), "input2": b.flatten().tolist(), "output": y.flatten().tolist()}


def softmax():
    rows, depth = int(rng.integers(1, 4)), int(rng.integers(1, 40))
    s_in, zp_in = rand_scale(-7, 0), int(rng.integers(-128, 128))
    beta = 1.0
    opts = tfl.SoftmaxOptionsT()
    opts.beta = beta
    x = i8((rows, depth))
    y = run(tfl.BuiltinOperator.SOFTMAX, tfl.BuiltinOptions.SoftmaxOptions, opts, [qt((rows, depth), s_in, zp_in)],
            qt((rows, depth), 1.0 / 256.0, -128), [x])
    return {"op": "softmax", "rows": rows, "depth": depth, "beta": beta, "s_in": s_in, "zp_in": zp_in,
            "input": x.flatten().tolist(), "output": y.flatten().tolist()}


def main():
    cases = []
    for _ in range(12):
        cases.append(fully_connected())
        cases.append(conv_like(False))
        cases.append(conv_like(True))
    for _ in range(6):
        cases.append(fully_connected(sweep=True))
    for _ in range(8):
        cases += [pool("avg"), pool("max"), relu(False), relu(True), add(), softmax()]
    with open(OUT, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]\n")
    print(f"{len(cases)} cases -> {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
