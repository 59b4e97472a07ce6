//! Times one MiniLM forward pass (batch x seq tokens) on the CPU: the median of several runs after
//! a warm-up. Usage: `minilm_bench MODEL_DIR [BATCH] [SEQ] [RUNS]` (defaults 1 128 20).

use rlx_driver::Device;
use rlx_models::{SentenceEmbedder, TokenBatch};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().ok_or("usage: minilm_bench MODEL_DIR [BATCH] [SEQ] [RUNS]")?;
    let num = |i: usize, d: usize| args.get(i).map_or(Ok(d), |s| s.parse::<usize>());
    let (batch, seq, runs) = (num(1, 1)?, num(2, 128)?, num(3, 20)?.max(1));
    let mut m = SentenceEmbedder::load(dir, Device::Cpu)?;
    if seq < 2 || seq > m.max_len() {
        return Err(format!("SEQ must be in 2..={}", m.max_len()).into());
    }
    // A real text, cut to exactly `seq` tokens with [SEP] kept last.
    let text = "the quick brown fox jumps over the lazy dog while the compiler plans its arena ".repeat(40);
    let one = m.tokenizer().encode_batch(&[text.as_str()])?;
    if one.seq < seq {
        return Err(format!("the sample text has only {} tokens", one.seq).into());
    }
    let mut ids: Vec<i64> = one.ids[..seq].to_vec();
    ids[seq - 1] = one.ids[one.seq - 1];
    let t =
        TokenBatch { batch, seq, ids: ids.repeat(batch), type_ids: vec![0; batch * seq], mask: vec![1; batch * seq] };

    let c0 = Instant::now();
    m.prepare(batch, seq)?;
    let compile = c0.elapsed().as_secs_f64();
    m.embed_tokens(&t)?;
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            m.embed_tokens(&t).map(|_| s.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    println!(
        "minilm-l6 {batch}x{seq} cpu: median {med:.2} ms over {runs} runs (min {:.2}, max {:.2}); {:.0} tokens/s; compile+load {:.2} s",
        times[0],
        times[times.len() - 1],
        (batch * seq) as f64 / (med / 1e3),
        compile
    );
    Ok(())
}
