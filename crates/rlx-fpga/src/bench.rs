//! The generated testbench (`tb.sv`) and its vectors: every sample of a test set runs through
//! `rlx_top` one at a time; the testbench counts the samples whose logits equal the host INT8
//! run in every byte, the classes equal to the labels, and the cycles per inference.

use crate::design::Design;
use crate::emit::{clog2, hex_word};
use std::fmt::Write;

/// Lines the testbench prints, for scripts and tests to read: `AGREEMENT A/N`, `ACCURACY C/N`,
/// `CYCLES K`.
pub const AGREEMENT: &str = "fpga: agreement with the host INT8 run:";
/// See [`AGREEMENT`].
pub const ACCURACY: &str = "fpga: accuracy";
/// See [`AGREEMENT`].
pub const CYCLES: &str = "fpga: cycles per inference";

/// `tb.sv` for `samples` samples.
pub fn testbench(d: &Design, samples: usize) -> String {
    let (n_in, n_out) = (d.inputs(), d.outputs());
    let cw = clog2(n_out) as usize;
    let class = if cw < 8 { format!("{{{}'d0, out_class}}", 8 - cw) } else { "out_class[7:0]".into() };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"// Testbench: runs the {samples} samples of tb_inputs.hex through rlx_top one at a time and
// compares the logits with the host INT8 run (tb_expect.hex) and the class with the label
// (tb_labels.hex). Signals are driven and sampled on the falling edge, away from the design's.
// No `timescale: the design has none (verilator rejects a mix), and delays are in plain units.
module tb;
    logic clk = 1'b0;
    logic rst = 1'b1;
    logic in_valid = 1'b0;
    logic in_ready;
    logic [{inb}:0] in_data = '0;
    logic out_valid;
    logic out_ready = 1'b1;
    logic [{outb}:0] out_logits;
    logic [{clb}:0] out_class;
    logic [{inb}:0] inputs [0:{last}];
    logic [{outb}:0] expected [0:{last}];
    logic [7:0] labels [0:{last}];
    integer i;
    integer agree = 0;
    integer correct = 0;
    integer cycle = 0;
    integer start = 0;
    integer cycles = 0;

    rlx_top dut (.*);

    always #5 clk = ~clk;
    always @(posedge clk) cycle <= cycle + 1;

    initial begin
        $readmemh("tb_inputs.hex", inputs);
        $readmemh("tb_expect.hex", expected);
        $readmemh("tb_labels.hex", labels);
        repeat (8) @(negedge clk);
        rst = 1'b0;
        for (i = 0; i < {samples}; i = i + 1) begin
            @(negedge clk);
            in_data = inputs[i];
            in_valid = 1'b1;
            while (!in_ready) @(negedge clk);
            start = cycle;  // accepted at the next rising edge
            @(negedge clk);
            in_valid = 1'b0;
            while (!out_valid) @(negedge clk);
            cycles = cycle - start;  // the output is taken at the next rising edge
            if (out_logits == expected[i]) agree = agree + 1;
            else if (i - agree < 5) $display("fpga: sample %0d: logits %h, host INT8 run %h", i, out_logits, expected[i]);
            if ({class} == labels[i]) correct = correct + 1;
        end
        $display("{AGREEMENT} %0d/%0d", agree, {samples});
        $display("{ACCURACY} %0d/%0d", correct, {samples});
        $display("{CYCLES} %0d", cycles);
        $finish;
    end
endmodule
"#,
        inb = 8 * n_in - 1,
        outb = 8 * n_out - 1,
        clb = cw - 1,
        last = samples.max(1) - 1,
    );
    s
}

/// The testbench's vectors: (file name, contents) for inputs, expected logits and labels.
pub fn vectors(inputs: &[Vec<i8>], expected: &[Vec<i8>], labels: &[u8]) -> Vec<(String, String)> {
    let lines = |v: &[Vec<i8>]| v.iter().map(|x| hex_word(x.iter().map(|&b| b as u8)) + "\n").collect::<String>();
    vec![
        ("tb_inputs.hex".into(), lines(inputs)),
        ("tb_expect.hex".into(), lines(expected)),
        ("tb_labels.hex".into(), labels.iter().map(|l| format!("{l:02x}\n")).collect()),
    ]
}

/// Reads `A/N` after `key` in a simulator's log.
pub fn read_ratio(log: &str, key: &str) -> Option<(usize, usize)> {
    let line = log.lines().find_map(|l| l.trim().strip_prefix(key))?;
    let (a, n) = line.trim().split_once('/')?;
    Some((a.trim().parse().ok()?, n.trim().parse().ok()?))
}

/// Reads the number after `key` in a simulator's log.
pub fn read_number(log: &str, key: &str) -> Option<usize> {
    log.lines().find_map(|l| l.trim().strip_prefix(key)).and_then(|v| v.trim().parse().ok())
}
