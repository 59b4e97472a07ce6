//! SystemVerilog text: one module per layer (from the template `sv/fc.sv`), an argmax, the top
//! module that chains them with valid/ready handshakes, and the ROM contents as `$readmemh` files.
//!
//! Ports are flat `[8*N-1:0]` buses (iverilog 11 rejects unpacked-array ports); every constant
//! is written with its width so the text is clean under `verilator --lint-only -Wall`.

use crate::design::{Design, FcPlan};
use std::fmt::Write;

const FC_TEMPLATE: &str = include_str!("sv/fc.sv");

/// Bits to count `0..n` (at least 1).
pub fn clog2(n: usize) -> u32 {
    if n <= 1 { 1 } else { usize::BITS - (n - 1).leading_zeros() }
}

/// `template` with each `$KEY` replaced, longest keys first (so `$OUT1` is not read as `$OUT`).
fn fill(template: &str, keys: &mut [(&str, String)]) -> String {
    keys.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    let mut s = template.to_string();
    for (k, v) in keys.iter() {
        s = s.replace(&format!("${k}"), v);
    }
    s
}

/// A signed 32-bit literal.
fn s32(v: i32) -> String {
    if v < 0 { format!("-32'sd{}", (v as i64).unsigned_abs()) } else { format!("32'sd{v}") }
}

/// `a + b` over `terms` as a balanced tree, so the adder depth is `log2(terms)`.
fn tree(terms: &[String]) -> String {
    match terms {
        [] => "'0".into(),
        [t] => t.clone(),
        _ => {
            let (a, b) = terms.split_at(terms.len() / 2);
            let wrap = |t: &[String]| if t.len() > 1 { format!("({})", tree(t)) } else { tree(t) };
            format!("{} + {}", wrap(a), wrap(b))
        }
    }
}

/// The module `rlx_fc{k}` of layer `k`.
pub fn layer_module(k: usize, l: &FcPlan, reuse: usize) -> String {
    let lane_bits = 8 * l.lanes;
    let x_bits = lane_bits * l.chunks;
    let (aw, cw, ow) = (clog2(l.words()), clog2(l.chunks), clog2(l.outputs));
    let (acc, xs) = (l.acc_bits as usize, l.shifted_bits as usize);
    let pw = xs + 32;
    let qw = pw - 31;
    let xload =
        if x_bits > 8 * l.inputs { format!("{{{}'d0, in_data}}", x_bits - 8 * l.inputs) } else { "in_data".into() };
    let xmux = if l.chunks == 1 {
        "        xa <= x;".to_string()
    } else {
        let mut m = "        case (chunk)\n".to_string();
        for c in 0..l.chunks {
            let sel = format!("x[{}:{}]", (c + 1) * lane_bits - 1, c * lane_bits);
            if c + 1 < l.chunks {
                writeln!(m, "            {cw}'d{c}: xa <= {sel};").unwrap();
            } else {
                writeln!(m, "            default: xa <= {sel};").unwrap();
            }
        }
        m + "        endcase"
    };
    let terms: Vec<String> = (0..l.lanes).map(|i| format!("pe[{i}]")).collect();
    let xsext = if xs > acc { format!("{{{{{}{{acc[{}]}}}}, acc}}", xs - acc, acc - 1) } else { "acc".into() };
    let q32 = match qw {
        32 => "vq".to_string(),
        w if w > 32 => "vq[31:0]".to_string(),
        w => format!("{{{{{}{{vq[{}]}}}}, vq}}", 32 - w, w - 1),
    };
    let act = match (l.act_min, l.act_max) {
        (-128, 127) => "no activation".to_string(),
        (lo, 127) if lo == l.out_zero_point.max(-128) => "ReLU".to_string(),
        (lo, hi) => format!("activation clamp [{lo}, {hi}]"),
    };
    let (mk, steps) = l.requant_steps();
    let (edecl, ebody) = if steps == 1 {
        (
            String::new(),
            r#"    always_ff @(posedge clk) begin
        // Signed x signed, the product as wide as both operands together.
        /* verilator lint_off WIDTH */
        e_prod <= xs * $signed(d_mult);
        /* verilator lint_on WIDTH */
        e_right <= d_right;
        e_valid <= d_valid && !rst;
        e_chan <= d_chan;
    end
"#
            .to_string(),
        )
    } else {
        let mw = mk * steps;
        let sw = clog2(steps);
        let m_ext = if mw > 32 { format!("{{{}'d0, d_mult}}", mw - 32) } else { "d_mult".into() };
        (
            format!(
                "    // The multiplier's slices, most significant first, and the slices still to add.\n    \
                 logic signed [{xs1}:0] e_x;\n    logic [{mw1}:0] m_ext, m_rest;\n    logic [{sw1}:0] step;\n",
                xs1 = xs - 1,
                mw1 = mw - 1,
                sw1 = sw - 1
            ),
            format!(
                r#"    // {steps} cycles a product (the channel's next accumulator comes {chunks} cycles after
    // this one): p = p * 2^{mk} + x * slice, from the most significant slice.
    assign m_ext = {m_ext};
    always_ff @(posedge clk) begin
        /* verilator lint_off WIDTH */
        if (rst) begin
            step <= '0;
        end else if (d_valid) begin
            e_prod <= xs * $signed({{1'b0, m_ext[{mw1}:{lo}]}});
            m_rest <= m_ext << {mk};
            e_x <= xs;
            e_right <= d_right;
            e_chan <= d_chan;
            step <= {sw}'d{last};
        end else if (step != '0) begin
            e_prod <= (e_prod <<< {mk}) + e_x * $signed({{1'b0, m_rest[{mw1}:{lo}]}});
            m_rest <= m_rest << {mk};
            step <= step - {sw}'d1;
        end
        /* verilator lint_on WIDTH */
        e_valid <= step == {sw}'d1 && !rst;
    end
"#,
                chunks = l.chunks,
                mw1 = mw - 1,
                lo = mw - mk,
                last = steps - 1,
            ),
        )
    };
    let mut keys = vec![
        ("EDECL", edecl),
        ("EBODY", ebody),
        ("MK", mk.to_string()),
        ("K", k.to_string()),
        ("NODE", l.node.clone()),
        ("IN", l.inputs.to_string()),
        ("OUT", l.outputs.to_string()),
        ("ACT", act),
        ("LANES", l.lanes.to_string()),
        ("CHUNKS", l.chunks.to_string()),
        ("REUSE", reuse.to_string()),
        ("WORDS", l.words().to_string()),
        ("INBITS", (8 * l.inputs - 1).to_string()),
        ("OUTBITS", (8 * l.outputs - 1).to_string()),
        ("LANEBITS", (lane_bits - 1).to_string()),
        ("WORDS1", (l.words() - 1).to_string()),
        ("OUT1", (l.outputs - 1).to_string()),
        ("LANES1", (l.lanes - 1).to_string()),
        ("AW", (aw - 1).to_string()),
        ("CW", (cw - 1).to_string()),
        ("OW", (ow - 1).to_string()),
        ("AWd1", format!("{aw}'d1")),
        ("CWd1", format!("{cw}'d1")),
        ("OWd1", format!("{ow}'d1")),
        ("CLAST", format!("{cw}'d{}", l.chunks - 1)),
        ("ALAST", format!("{aw}'d{}", l.words() - 1)),
        ("OLAST", format!("{ow}'d{}", l.outputs - 1)),
        ("XBITS", (x_bits - 1).to_string()),
        ("XLOAD", xload),
        ("XMUX", xmux),
        ("ACC", acc.to_string()),
        ("ACC1", (acc - 1).to_string()),
        ("ACCEXT", (acc - 16).to_string()),
        ("TREE", tree(&terms)),
        ("XS1", (xs - 1).to_string()),
        ("XSEXT", xsext),
        ("PW", pw.to_string()),
        ("PW1", (pw - 1).to_string()),
        ("QW1", (qw - 1).to_string()),
        ("QW0", format!("{}'d0", qw - 1)),
        ("Q32", q32),
        ("NUDGEPOS", format!("{pw}'sd{}", 1u64 << 30)),
        ("NUDGENEG", format!("-{pw}'sd{}", (1u64 << 30) - 1)),
        ("ZP", s32(l.out_zero_point)),
        ("MIN", s32(l.act_min)),
        ("MAX", s32(l.act_max)),
        ("MIN8", format!("8'h{:02x}", l.act_min as i8 as u8)),
        ("MAX8", format!("8'h{:02x}", l.act_max as i8 as u8)),
    ];
    fill(FC_TEMPLATE, &mut keys)
}

/// `rlx_argmax`: the index of the largest logit (the first of equal ones, as the host's argmax),
/// a chain of compare-and-select stages (combinational).
pub fn argmax_module(n: usize) -> String {
    let cw = clog2(n);
    let mut s = String::new();
    writeln!(s, "// The class: the index of the largest of {n} int8 logits, the first of equal ones (as the").unwrap();
    writeln!(s, "// host's argmax). Stage i holds the best of logits 0..=i and its index.").unwrap();
    writeln!(s, "module rlx_argmax (").unwrap();
    writeln!(s, "    input  logic [{}:0] in_data,", 8 * n - 1).unwrap();
    writeln!(s, "    output logic [{}:0] out_class", cw - 1).unwrap();
    writeln!(s, ");").unwrap();
    writeln!(s, "    logic signed [7:0] best0;").unwrap();
    writeln!(s, "    logic [{}:0] class0;", cw - 1).unwrap();
    writeln!(s, "    assign best0 = in_data[7:0];").unwrap();
    writeln!(s, "    assign class0 = {cw}'d0;").unwrap();
    for i in 1..n {
        let (sel, p) = (format!("in_data[{}:{}]", 8 * i + 7, 8 * i), i - 1);
        writeln!(s, "    logic signed [7:0] best{i};").unwrap();
        writeln!(s, "    logic [{}:0] class{i};", cw - 1).unwrap();
        writeln!(s, "    assign best{i} = $signed({sel}) > best{p} ? {sel} : best{p};").unwrap();
        writeln!(s, "    assign class{i} = $signed({sel}) > best{p} ? {cw}'d{i} : class{p};").unwrap();
    }
    if n > 1 {
        // The last stage's best is not needed, only its index.
        writeln!(s, "    /* verilator lint_off UNUSEDSIGNAL */").unwrap();
        writeln!(s, "    logic signed [7:0] unused_best;").unwrap();
        writeln!(s, "    assign unused_best = best{};", n - 1).unwrap();
        writeln!(s, "    /* verilator lint_on UNUSEDSIGNAL */").unwrap();
    }
    writeln!(s, "    assign out_class = class{};", n - 1).unwrap();
    writeln!(s, "endmodule").unwrap();
    s
}

/// `rlx_top`: the layers chained by valid/ready handshakes, then the argmax.
pub fn top_module(d: &Design) -> String {
    let (n_in, n_out) = (d.inputs(), d.outputs());
    let cw = clog2(n_out);
    let mut s = String::new();
    writeln!(s, "// rlx_top: {} fully connected layers (reuse {}), then argmax.", d.layers.len(), d.reuse).unwrap();
    writeln!(s, "// Input: {n_in} int8 values, element i in in_data[8*i +: 8], held with in_valid until in_ready.")
        .unwrap();
    writeln!(s, "// Output: {n_out} int8 logits (out_logits) and their argmax (out_class), held with out_valid")
        .unwrap();
    writeln!(s, "// until out_ready. rst is synchronous, active high.").unwrap();
    writeln!(s, "module rlx_top (").unwrap();
    writeln!(s, "    input  logic clk,").unwrap();
    writeln!(s, "    input  logic rst,").unwrap();
    writeln!(s, "    input  logic in_valid,").unwrap();
    writeln!(s, "    output logic in_ready,").unwrap();
    writeln!(s, "    input  logic [{}:0] in_data,", 8 * n_in - 1).unwrap();
    writeln!(s, "    output logic out_valid,").unwrap();
    writeln!(s, "    input  logic out_ready,").unwrap();
    writeln!(s, "    output logic [{}:0] out_logits,", 8 * n_out - 1).unwrap();
    writeln!(s, "    output logic [{}:0] out_class", cw - 1).unwrap();
    writeln!(s, ");").unwrap();
    let last = d.layers.len();
    for (k, l) in d.layers.iter().enumerate().skip(1) {
        writeln!(s, "    logic s{k}_valid, s{k}_ready;").unwrap();
        writeln!(s, "    logic [{}:0] s{k}_data;", 8 * l.inputs - 1).unwrap();
    }
    for k in 0..last {
        let src = if k == 0 {
            ["in_valid".to_string(), "in_ready".into(), "in_data".into()]
        } else {
            [format!("s{k}_valid"), format!("s{k}_ready"), format!("s{k}_data")]
        };
        let dst = if k + 1 == last {
            ["out_valid".to_string(), "out_ready".into(), "out_logits".into()]
        } else {
            [format!("s{}_valid", k + 1), format!("s{}_ready", k + 1), format!("s{}_data", k + 1)]
        };
        writeln!(s, "    rlx_fc{k} layer{k} (").unwrap();
        writeln!(s, "        .clk(clk), .rst(rst),").unwrap();
        writeln!(s, "        .in_valid({}), .in_ready({}), .in_data({}),", src[0], src[1], src[2]).unwrap();
        writeln!(s, "        .out_valid({}), .out_ready({}), .out_data({})", dst[0], dst[1], dst[2]).unwrap();
        writeln!(s, "    );").unwrap();
    }
    writeln!(s, "    rlx_argmax argmax (.in_data(out_logits), .out_class(out_class));").unwrap();
    writeln!(s, "endmodule").unwrap();
    s
}

/// `rlx_board`: `rlx_top` behind byte-wide pins, the top for place and route (the flat input
/// bus alone would need more pins than an iCE40 package has).
pub fn board_module(d: &Design) -> String {
    let (n_in, n_out) = (d.inputs(), d.outputs());
    let (nw, cw) = (clog2(n_in), clog2(n_out));
    let shift = if n_in > 1 { format!("{{byte_data, image[{}:8]}}", 8 * n_in - 1) } else { "byte_data".into() };
    format!(
        r#"// rlx_board: rlx_top behind byte-wide pins, the top module for place and route (the flat
// {n_in}-byte input bus would need more pins than the package has). Input bytes arrive one per
// cycle (element 0 first) with byte_valid; after the last, the image goes to rlx_top, and the
// class comes back with class_valid.
module rlx_board (
    input  logic clk,
    input  logic rst,
    input  logic byte_valid,
    output logic byte_ready,
    input  logic [7:0] byte_data,
    output logic class_valid,
    input  logic class_ready,
    output logic [{cl}:0] class_out
);
    logic [{ib}:0] image;
    logic [{nw1}:0] count;
    logic loaded, top_ready;
    /* verilator lint_off UNUSEDSIGNAL */
    logic [{ob}:0] logits;  // only the class leaves the chip
    /* verilator lint_on UNUSEDSIGNAL */
    assign byte_ready = !loaded;
    always_ff @(posedge clk) begin
        if (rst) begin
            count <= '0;
            loaded <= 1'b0;
        end else if (loaded) begin
            if (top_ready) loaded <= 1'b0;
        end else if (byte_valid) begin
            image <= {shift};
            if (count == {nw}'d{last}) begin
                count <= '0;
                loaded <= 1'b1;
            end else begin
                count <= count + {nw}'d1;
            end
        end
    end
    rlx_top top (
        .clk(clk), .rst(rst),
        .in_valid(loaded), .in_ready(top_ready), .in_data(image),
        .out_valid(class_valid), .out_ready(class_ready), .out_logits(logits), .out_class(class_out)
    );
endmodule
"#,
        cl = cw - 1,
        ib = 8 * n_in - 1,
        nw1 = nw - 1,
        ob = 8 * n_out - 1,
        last = n_in - 1,
    )
}

/// The design's source files, one module each (named as the module, as verilator's lint
/// wants): (file name, contents).
pub fn design_sources(d: &Design, origin: &str) -> Vec<(String, String)> {
    let head = format!(
        "// Generated by `rlx export fpga` from {origin}: do not edit.\n// INT8 inference, bit-exact with the host INT8 reference (rlx-cortexm-export).\n\n"
    );
    let mut files: Vec<(String, String)> =
        d.layers.iter().enumerate().map(|(k, l)| (format!("rlx_fc{k}.sv"), layer_module(k, l, d.reuse))).collect();
    files.push(("rlx_argmax.sv".into(), argmax_module(d.outputs())));
    files.push(("rlx_top.sv".into(), top_module(d)));
    files.push(("rlx_board.sv".into(), board_module(d)));
    files.into_iter().map(|(n, t)| (n, head.clone() + &t)).collect()
}

/// Bytes as one `$readmemh` word: the first byte in the low bits (written last).
pub fn hex_word(bytes: impl DoubleEndedIterator<Item = u8>) -> String {
    bytes.rev().map(|b| format!("{b:02x}")).collect()
}

/// The ROM files of layer `k`: (file name, contents).
pub fn rom_files(k: usize, l: &FcPlan) -> Vec<(String, String)> {
    let words: String = l.weights.chunks(l.lanes).map(|w| hex_word(w.iter().map(|&b| b as u8)) + "\n").collect();
    let u32s = |v: &[i32]| v.iter().map(|&b| format!("{:08x}\n", b as u32)).collect::<String>();
    let shifts: String = l.shift.iter().map(|&s| format!("{:02x}\n", s as u8 & 0x3f)).collect();
    vec![
        (format!("layer{k}_weights.hex"), words),
        (format!("layer{k}_bias.hex"), u32s(&l.bias)),
        (format!("layer{k}_mult.hex"), u32s(&l.multiplier)),
        (format!("layer{k}_shift.hex"), shifts),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_tree_and_widths() {
        let t: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
        assert_eq!(tree(&t), "(p0 + p1) + (p2 + p3)");
        assert_eq!(tree(&t[..3]), "p0 + (p1 + p2)");
        assert_eq!(clog2(1), 1);
        assert_eq!(clog2(64), 6);
        assert_eq!(clog2(65), 7);
        assert_eq!(hex_word([1u8, 2, 0xff].into_iter()), "ff0201");
        assert_eq!(s32(-128), "-32'sd128");
    }
}
