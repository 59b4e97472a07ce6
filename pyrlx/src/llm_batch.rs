//! `LLM.generate_batch`: many prompts at once through rlx-models' continuous-batching scheduler
//! over a paged KV cache (the engine `rlx serve` runs), kept with the model between calls.

use crate::llm::PyLlm;
use rlx::models::SamplerConfig;
use rlx::models::llm::{BatchFinish, BatchScheduler, PagedConfig, PagedModel, generate_paged};

/// The scheduler of the last `generate_batch` call and the shape it was built for.
pub(crate) struct BatchSlot {
    ctx: usize,
    max_batch: usize,
    sched: BatchScheduler,
}

/// One prompt's result: its text, its tokens and why it ended ("stop" or "length").
pub(crate) type BatchResult = (String, Vec<u32>, &'static str);

/// Runs every prompt to its end, `max_batch` sequences per step; reuses the scheduler (and its
/// compiled graphs) while the context it was built for is enough and `max_batch` is unchanged.
pub(crate) fn run(
    llm: &PyLlm,
    slot: &mut Option<BatchSlot>,
    prompts: &[Vec<u32>],
    max_tokens: usize,
    sampler: &SamplerConfig,
    stop_tokens: &[u32],
    max_batch: usize,
) -> rlx::ir::Result<Vec<BatchResult>> {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let need = longest + max_tokens;
    let fits = slot.as_ref().is_some_and(|s| s.ctx >= need && s.max_batch == max_batch);
    if !fits {
        *slot = None;
        let ctx = llm.ctx_for(need);
        let model = llm.load_model(ctx)?;
        let paged = PagedModel::new(model, PagedConfig::full(max_batch, ctx))?;
        *slot = Some(BatchSlot { ctx, max_batch, sched: BatchScheduler::new(paged) });
    }
    let s = slot.as_mut().expect("set above");
    let out = generate_paged(&mut s.sched, prompts, max_tokens, sampler, stop_tokens)?;
    Ok(out
        .into_iter()
        .map(|(tokens, finish)| {
            let why = if finish == BatchFinish::Length { "length" } else { "stop" };
            (llm.detokenize_ids(&tokens), tokens, why)
        })
        .collect())
}
