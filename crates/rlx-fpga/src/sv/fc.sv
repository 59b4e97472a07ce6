// Layer $K (rlx node $NODE): fully connected $IN -> $OUT, $ACT.
// A MAC array of $LANES multipliers (8x8 bits) takes $CHUNKS cycles per output channel (reuse
// $REUSE); the channels run one after another through a pipeline: ROM read, multiply, adder
// tree, accumulate (from the bias), requantization multiply, rounding and clamp.
// Constant data, loaded with $readmemh:
//   layer$K_weights.hex  $WORDS words of $LANES bytes (word = channel * $CHUNKS + chunk, lane 0 in
//                       the low byte; zero past the $IN inputs)
//   layer$K_bias.hex     int32 bias per channel, the input zero point folded in
//                       (bias + input_offset * sum(weights)), so the multipliers need no offset
//   layer$K_mult.hex     Q31 multiplier per channel
//   layer$K_shift.hex    shift per channel (6-bit two's complement, -31..30; positive: left)
// Requantization is TFLite Micro's MultiplyByQuantizedMultiplier (CMSIS-NN's double rounding),
// the same as rlx_cortexm::requant and the host INT8 reference, so every output is bit-exact.
module rlx_fc$K (
    input  logic                clk,
    input  logic                rst,
    input  logic                in_valid,
    output logic                in_ready,
    input  logic [$INBITS:0]    in_data,
    output logic                out_valid,
    input  logic                out_ready,
    output logic [$OUTBITS:0]    out_data
);
    logic [$LANEBITS:0] weights [0:$WORDS1];
    logic [31:0] bias [0:$OUT1];
    logic [31:0] mult [0:$OUT1];
    logic [5:0] shift [0:$OUT1];
    initial begin
        $readmemh("layer$K_weights.hex", weights);
        $readmemh("layer$K_bias.hex", bias);
        $readmemh("layer$K_mult.hex", mult);
        $readmemh("layer$K_shift.hex", shift);
    end

    function automatic logic signed [15:0] mul8(input logic [7:0] a, input logic [7:0] b);
        mul8 = $signed({{8{a[7]}}, a}) * $signed({{8{b[7]}}, b});
    endfunction

    // Control: idle (in_ready) -> busy (issuing ROM words, then draining) -> full (out_valid
    // until out_ready). One input in flight; the next layer's handshake overlaps the next input.
    logic busy, full, issuing;
    logic [$AW:0] addr;  // ROM word: channel * $CHUNKS + chunk
    logic [$CW:0] chunk;
    logic [$OW:0] chan;
    assign in_ready = !busy && !full;
    assign out_valid = full;

    // The input, latched on acceptance, zero-padded to $CHUNKS chunks of $LANES bytes.
    logic [$XBITS:0] x;

    // Stage A: the ROM word and the input chunk it multiplies.
    logic [$LANEBITS:0] wa, xa;
    logic a_valid, a_first, a_last;
    logic [$OW:0] a_chan;
    // Stage B: $LANES products.
    logic signed [15:0] prod [0:$LANES1];
    logic b_valid, b_first, b_last;
    logic [$OW:0] b_chan;
    // Stage C: their sum (a balanced adder tree), sign-extended to the accumulator's $ACC bits.
    logic signed [$ACC1:0] pe [0:$LANES1];
    logic signed [$ACC1:0] psum;
    logic c_valid, c_first, c_last;
    logic [$OW:0] c_chan;
    // Stage D: the accumulator of the current channel.
    logic signed [$ACC1:0] acc, acc_next, bias_c;
    logic d_valid;
    logic [$OW:0] d_chan;
    logic [31:0] d_mult;
    logic [5:0] d_shift;
    // Stage E: (acc << left) * multiplier, $PW bits, $MK bits of the multiplier a cycle.
    logic [4:0] d_left, d_right, e_right;
    logic signed [$XS1:0] xs;
    logic signed [$PW1:0] e_prod;
    logic e_valid;
    logic [$OW:0] e_chan;
$EDECL    // Stage F (combinational, written into the output register): rounding, zero point, clamp.
    logic signed [$PW1:0] v;
    logic signed [$QW1:0] vq;
    logic signed [31:0] q, y, z;
    logic [31:0] mask, rem, thr;
    logic [7:0] y8;
    logic [7:0] outs [0:$OUT1];

    always_ff @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
            full <= 1'b0;
            issuing <= 1'b0;
        end else begin
            if (in_valid && in_ready) begin
                busy <= 1'b1;
                issuing <= 1'b1;
                addr <= '0;
                chunk <= '0;
                chan <= '0;
                x <= $XLOAD;
            end else if (issuing) begin
                addr <= addr + $AWd1;
                if (chunk == $CLAST) begin
                    chunk <= '0;
                    chan <= chan + $OWd1;
                end else begin
                    chunk <= chunk + $CWd1;
                end
                if (addr == $ALAST) issuing <= 1'b0;
            end
            if (e_valid && e_chan == $OLAST) begin
                busy <= 1'b0;
                full <= 1'b1;
            end
            if (full && out_ready) full <= 1'b0;
        end
    end

    // Stage A.
    always_ff @(posedge clk) begin
        wa <= weights[addr];
$XMUX
        a_valid <= issuing && !rst;
        a_first <= chunk == '0;
        a_last <= chunk == $CLAST;
        a_chan <= chan;
    end

    // Stage B.
    always_ff @(posedge clk) begin
        for (int i = 0; i < $LANES; i++) prod[i] <= mul8(wa[8*i +: 8], xa[8*i +: 8]);
        b_valid <= a_valid && !rst;
        b_first <= a_first;
        b_last <= a_last;
        b_chan <= a_chan;
    end

    // Stage C.
    for (genvar i = 0; i < $LANES; i++) begin : g_pe
        assign pe[i] = {{$ACCEXT{prod[i][15]}}, prod[i]};
    end
    always_ff @(posedge clk) begin
        psum <= $TREE;
        c_valid <= b_valid && !rst;
        c_first <= b_first;
        c_last <= b_last;
        c_chan <= b_chan;
    end

    // Stage D: the bias starts each channel (it fits the accumulator: the export sized it so).
    assign bias_c = $signed(bias[c_chan][$ACC1:0]);
    assign acc_next = (c_first ? bias_c : acc) + psum;
    always_ff @(posedge clk) begin
        if (c_valid) acc <= acc_next;
        d_valid <= c_valid && c_last && !rst;
        d_chan <= c_chan;
        d_mult <= mult[c_chan];
        d_shift <= shift[c_chan];
    end

    // Stage E: the left shift, then the product with the (non-negative) Q31 multiplier.
    assign d_left = d_shift[5] ? 5'd0 : d_shift[4:0];
    assign d_right = d_shift[5] ? 5'd0 - d_shift[4:0] : 5'd0;
    assign xs = $XSEXT << d_left;
$EBODY
    // Stage F. SaturatingRoundingDoublingHighMul: (prod + nudge) / 2^31 truncated toward zero
    // (a floor shift, plus one for a negative value with a remainder); the multiplier is never
    // negative, so its one saturating case cannot occur.
    assign v = e_prod + (e_prod[$PW1] ? $NUDGENEG : $NUDGEPOS);
    assign vq = v[$PW1:31] + $signed({$QW0, v[$PW1] && v[30:0] != 31'd0});
    assign q = $Q32;
    // RoundingDivideByPOT: an arithmetic right shift rounded half away from zero.
    assign mask = (32'd1 << e_right) - 32'd1;
    assign rem = q & mask;
    assign thr = (mask >> 1) + {31'd0, q[31]};
    assign y = (q >>> e_right) + $signed({31'd0, rem > thr});
    assign z = y + $ZP;
    assign y8 = z < $MIN ? $MIN8 : (z > $MAX ? $MAX8 : z[7:0]);
    always_ff @(posedge clk) if (e_valid) outs[e_chan] <= y8;

    for (genvar i = 0; i < $OUT; i++) begin : g_out
        assign out_data[8*i +: 8] = outs[i];
    end
endmodule
