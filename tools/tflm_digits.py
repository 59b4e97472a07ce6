"""The exported digits models run end to end in TFLite Micro.

Reads the JSON that `cargo run -p rlx-cortexm-export --example dump_qmodel -- CKPT OUT.json`
writes (an exported model: int8 tensors, layers and their data, the quantized digits test inputs
and the rlx INT8 reference's outputs), builds the same model as a .tflite flatbuffer (per-channel
int8 weights, int32 biases, the activations' scales and zero points), runs every test input
through TFLite Micro's interpreter, prints how many outputs equal the rlx reference's, and writes
the TFLite Micro outputs to crates/rlx-cortexm-export/tests/fixtures/tflm_digits.json, which
tests/tflm_digits.rs compares with the exporter's, so the test needs no Python.

    /tmp/tflm/bin/python tools/tflm_digits.py mlp=/tmp/mlp.json conv=/tmp/conv.json
"""

import json
import os
import sys

import numpy as np
from tflite_micro.python.tflite_micro import runtime
from tflite_micro.tensorflow.lite.micro.compression import model_editor as me
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-cortexm-export", "tests", "fixtures",
                   "tflm_digits.json")
ACT = {"none": tfl.ActivationFunctionType.NONE, "relu": tfl.ActivationFunctionType.RELU,
       "relu6": tfl.ActivationFunctionType.RELU6}


def f32(x):
    return float(np.float32(x))


def padding(pad, size, k, stride, dilation, out):
    """TFLite has SAME and VALID only: the explicit padding must be one of them."""
    eff = (k - 1) * dilation + 1
    if pad == 0 and out == (size - eff) // stride + 1:
        return tfl.Padding.VALID
    same_out = -(-size // stride)
    if out == same_out and pad == max((same_out - 1) * stride + eff - size, 0) // 2:
        return tfl.Padding.SAME
    raise ValueError(f"padding {pad} of {size} (kernel {k}, stride {stride}) is neither SAME nor VALID")


def build(m):
    ts = m["tensors"]
    made = {}

    def tensor(i):
        if i not in made:
            t = ts[i]
            q = me.Quantization(scales=f32(t["scale"]), zero_points=t["zero_point"])
            made[i] = me.Tensor(shape=tuple(t["dims"]), dtype=tfl.TensorType.INT8, quantization=q)
        return made[i]

    ops = []
    for l in m["layers"]:
        ti, to = ts[l["input"]], ts[l["output"]]
        src = l["input"]
        if ti["alias_of"] is not None:
            # A reshape in the rlx graph: TFLite's RESHAPE between the two shapes.
            shape = me.Tensor(shape=(len(ti["dims"]),), dtype=tfl.TensorType.INT32,
                              data=np.array(ti["dims"], dtype=np.int32))
            opts = tfl.ReshapeOptionsT()
            opts.newShape = list(ti["dims"])
            op = me.Operator(opcode=tfl.BuiltinOperator.RESHAPE, inputs=[tensor(ti["alias_of"]), shape],
                             outputs=[tensor(src)])
            op._fb.builtinOptionsType, op._fb.builtinOptions = tfl.BuiltinOptions.ReshapeOptions, opts
            ops.append(op)
        x, y = tensor(src), tensor(l["output"])
        kind = l["op"]
        if kind in ("fully_connected", "conv2d", "depthwise_conv2d"):
            s_w = [f32(s) for s in l["w_scales"]]
            oc = len(l["bias"])
            if kind == "fully_connected":
                wshape, axis = (oc, ti["dims"][-1]), 0
            elif kind == "conv2d":
                wshape, axis = (oc, l["kernel"][0], l["kernel"][1], ti["dims"][3]), 0
            else:
                wshape, axis = (1, l["kernel"][0], l["kernel"][1], oc), 3
            w = me.Tensor(shape=wshape, dtype=tfl.TensorType.INT8, data=np.array(l["weights"], dtype=np.int8),
                          quantization=me.Quantization(scales=s_w, zero_points=[0] * oc, axis=axis))
            bs = [f32(f32(ti["scale"]) * s) for s in s_w]
            b = me.Tensor(shape=(oc,), dtype=tfl.TensorType.INT32, data=np.array(l["bias"], dtype=np.int32),
                          quantization=me.Quantization(scales=bs, zero_points=[0] * oc, axis=0))
            if kind == "fully_connected":
                opts = tfl.FullyConnectedOptionsT()
                code, otype = tfl.BuiltinOperator.FULLY_CONNECTED, tfl.BuiltinOptions.FullyConnectedOptions
            else:
                opts = tfl.Conv2DOptionsT() if kind == "conv2d" else tfl.DepthwiseConv2DOptionsT()
                if kind == "depthwise_conv2d":
                    opts.depthMultiplier = l["depthwise_multiplier"]
                code = tfl.BuiltinOperator.CONV_2D if kind == "conv2d" else tfl.BuiltinOperator.DEPTHWISE_CONV_2D
                otype = tfl.BuiltinOptions.Conv2DOptions if kind == "conv2d" else tfl.BuiltinOptions.DepthwiseConv2DOptions
                ph = padding(l["pad"][0], ti["dims"][1], l["kernel"][0], l["stride"][0], l["dilation"][0], to["dims"][1])
                pw = padding(l["pad"][1], ti["dims"][2], l["kernel"][1], l["stride"][1], l["dilation"][1], to["dims"][2])
                assert ph == pw, "one padding mode for both axes"
                opts.padding = ph
                opts.strideH, opts.strideW = l["stride"]
                opts.dilationHFactor, opts.dilationWFactor = l["dilation"]
            opts.fusedActivationFunction = ACT[l["act"]]
            op = me.Operator(opcode=code, inputs=[x, w, b], outputs=[y])
        elif kind in ("max_pool2d", "avg_pool2d"):
            opts = tfl.Pool2DOptionsT()
            ph = padding(l["pad"][0], ti["dims"][1], l["kernel"][0], l["stride"][0], 1, to["dims"][1])
            opts.padding = ph
            opts.strideH, opts.strideW = l["stride"]
            opts.filterHeight, opts.filterWidth = l["kernel"]
            code = tfl.BuiltinOperator.MAX_POOL_2D if kind == "max_pool2d" else tfl.BuiltinOperator.AVERAGE_POOL_2D
            otype = tfl.BuiltinOptions.Pool2DOptions
            op = me.Operator(opcode=code, inputs=[x], outputs=[y])
        elif kind == "add":
            opts = tfl.AddOptionsT()
            opts.fusedActivationFunction = ACT[l["act"]]
            code, otype = tfl.BuiltinOperator.ADD, tfl.BuiltinOptions.AddOptions
            op = me.Operator(opcode=code, inputs=[x, tensor(l["input2"])], outputs=[y])
        else:
            raise ValueError(f"no TFLite form for {kind} here")
        op._fb.builtinOptionsType, op._fb.builtinOptions = otype, opts
        ops.append(op)
    model = me.Model()
    model.add_subgraph(operators=ops, inputs=[tensor(m["input"])], outputs=[tensor(m["output"])])
    return bytes(model.build())


def main():
    fixture = {}
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        m = json.load(open(path))
        interp = runtime.Interpreter.from_bytes(build(m), arena_size=1 << 20)
        dims = m["tensors"][m["input"]]["dims"]
        outs = []
        for x in m["inputs"]:
            interp.set_input(np.array(x, dtype=np.int8).reshape(dims), 0)
            interp.invoke()
            outs.append(interp.get_output(0).flatten().tolist())
        same = sum(o == r for o, r in zip(outs, m["reference"]))
        print(f"{name}: {same}/{len(outs)} samples: TFLite Micro's int8 outputs equal the rlx INT8 reference's")
        fixture[name] = outs
    with open(OUT, "w") as f:
        f.write("{\n" + ",\n".join(f'"{k}":{json.dumps(v, separators=(",", ":"))}' for k, v in fixture.items()) + "\n}\n")
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
