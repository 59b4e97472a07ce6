//! `rlx train`: a character-level GPT on a bundled public-domain text (or any text file), with a
//! progress bar, samples as it goes, a loss-curve PNG and a resumable safetensors checkpoint.
//! Under `mpirun` (feature `mpi`) it trains data-parallel: `--batch` is the global batch, each rank
//! computes the gradients of its rows, and rank 0 alone writes logs, samples, curves and checkpoints.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::nn::gpt::{self, CharGpt, GptConfig, SampleOptions};
use rlx::nn::optim::Schedule;
use rlx::nn::train_dp::DataParallelStep;
use rlx::nn::{Adam, MixedPrecision, ParamStore, Rng, TrainConfig, TrainStep};
use rlx::prelude::*;
use rlx_dist::Collective;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Hamlet, Macbeth and Romeo and Juliet (public domain; made by tools/shakespeare_text.py).
const BUNDLED: &str = include_str!("../../../data/shakespeare.txt");

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Options of `rlx train`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// Training text (UTF-8); default: the bundled Shakespeare plays (404 KB).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Use only the first N characters of the text.
    #[arg(long)]
    pub max_chars: Option<usize>,
    /// Optimizer steps.
    #[arg(long, default_value_t = 600)]
    pub steps: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Context length.
    #[arg(long, default_value_t = 64)]
    pub ctx: usize,
    /// Transformer blocks (4 with --ctx 128 is the JAX peer's shape).
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Model width.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Peak learning rate (AdamW, b2 0.99, weight decay 0.1, linear warm-up then cosine).
    #[arg(long, default_value_t = 5e-3)]
    pub lr: f64,
    /// Warm-up steps.
    #[arg(long, default_value_t = 30)]
    pub warmup: usize,
    /// Clip gradients to this global norm (0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    /// Micro-batches averaged per step (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    pub accum: usize,
    /// Seed of the initial params, the batches and the samples.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print a sample (and the validation loss) every N steps (0 = only at the end).
    #[arg(long, default_value_t = 200)]
    pub sample_every: usize,
    /// Characters per sample.
    #[arg(long, default_value_t = 200)]
    pub sample_chars: usize,
    /// Where the checkpoint (model.safetensors) and the loss curve (loss.png) go.
    #[arg(long, default_value = "runs/char-gpt")]
    pub out: PathBuf,
    /// Resume from a checkpoint written by `rlx train` (params, optimizer state, config).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Mixed precision: `f16` or `bf16` matmuls with f32 master weights and dynamic loss
    /// scaling (`f32`: off). On the CPU, bf16 runs its matmuls on AMX where the CPU has it
    /// (faster than f32 for wide models, about even for the default one); f16 is slower.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub amp: String,
    /// Train data-parallel over the MPI ranks of `mpirun -np N rlx train ...` (on by itself when
    /// mpirun starts more than one process); needs a build with the `mpi` feature.
    #[arg(long)]
    pub distributed: bool,
    /// Seconds a rank waits in one collective (for a dead or stalled peer, or rank 0 writing a
    /// checkpoint and samples) before the job is aborted.
    #[arg(long, default_value_t = 60.0)]
    pub dist_timeout: f64,
}

fn read_text(args: &TrainArgs) -> Result<String, Box<dyn std::error::Error>> {
    let text = match &args.text {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => BUNDLED.to_string(),
    };
    Ok(match args.max_chars {
        Some(n) => text.chars().take(n).collect(),
        None => text,
    })
}

/// Mean loss over fixed held-out batches, with a loss-only graph.
struct Evaluator {
    exe: CompiledGraph,
    batches: Vec<(HostTensor, HostTensor)>,
}

impl Evaluator {
    fn new(cfg: &GptConfig, batch: usize, tokens: &[i64], device: Device, seed: u64) -> rlx::Result<Self> {
        let (g, _) = gpt::loss_graph(cfg, batch)?;
        let exe = Session::new(device).compile(g)?;
        let mut rng = Rng::new(seed ^ 0xE7A1);
        let batches = (0..4).map(|_| gpt::batch(tokens, batch, cfg.ctx, &mut rng)).collect::<rlx::Result<_>>()?;
        Ok(Evaluator { exe, batches })
    }

    fn loss(&mut self, params: &ParamStore) -> rlx::Result<f32> {
        for (name, t) in params.iter() {
            self.exe.set_param_tensor(name, t)?;
        }
        let mut total = 0.0;
        for (x, y) in &self.batches {
            total += self.exe.run_tensors(&[("x", x), ("y", y)])?[0].to_f32_vec()?[0];
        }
        Ok(total / self.batches.len() as f32)
    }
}

/// The training step: one process, or one rank of a data-parallel group.
enum Stepper {
    // Boxed: the two differ in size by hundreds of bytes.
    One(Box<TrainStep>),
    Dp(Box<DataParallelStep>),
}

impl Stepper {
    /// One update of `accum` micro-batches of `batch` rows (the global batch under data
    /// parallelism: every rank draws the same rows and trains on its share); returns its loss.
    fn update(&mut self, accum: usize, mut next: impl FnMut() -> rlx::Result<(HostTensor, HostTensor)>) -> Res<f32> {
        let mut loss = 0.0;
        for _ in 0..accum {
            let (x, y) = next()?;
            match self {
                Stepper::One(s) => loss += s.step(&[("x", &x), ("y", &y)])? / accum as f32,
                Stepper::Dp(s) => {
                    if let Some(l) = s.step(&[("x", &x), ("y", &y)])? {
                        loss = l;
                    }
                }
            }
        }
        Ok(loss)
    }

    fn params(&self) -> Res<ParamStore> {
        Ok(match self {
            Stepper::One(s) => s.params()?,
            Stepper::Dp(s) => s.params()?,
        })
    }

    fn state(&self) -> Res<ParamStore> {
        Ok(match self {
            Stepper::One(s) => s.state()?,
            Stepper::Dp(s) => s.state()?,
        })
    }
}

/// Runs `rlx train`: in this process, or data-parallel over MPI when asked (`--distributed`) or
/// started by mpirun with more than one process.
pub fn train(out: &mut impl Write, args: &TrainArgs, device: Device) -> Res {
    let launched = rlx_dist::launcher_world_size();
    if !args.distributed && launched.is_none_or(|n| n <= 1) {
        return run(out, args, device, None);
    }
    if !(args.dist_timeout.is_finite() && args.dist_timeout > 0.0) {
        return Err(format!("--dist-timeout must be a positive number of seconds, got {}", args.dist_timeout).into());
    }
    let comm = rlx_dist::Mpi::init(Duration::from_secs_f64(args.dist_timeout)).map_err(|e| match launched {
        Some(n) if !args.distributed => format!("started by mpirun with {n} processes, but {e}"),
        _ => e.to_string(),
    })?;
    let comm = Rc::new(comm);
    let rank = comm.rank();
    let mut sink = std::io::sink();
    // Rank 0 alone writes the log: the others' would repeat it.
    let log: &mut dyn Write = if rank == 0 { out } else { &mut sink };
    match run(log, args, device, Some(comm.clone())) {
        Ok(()) => Ok(()),
        // The other ranks may be waiting in a collective for this one: end the job now.
        Err(e) if comm.size() > 1 => {
            eprintln!("error: rank {rank} of {}: {e}", comm.size());
            comm.abort(1)
        }
        Err(e) => Err(e),
    }
}

/// Reads a checkpoint to resume from: rank 0 reads the file and broadcasts its bytes, so that
/// the other ranks need not see the same file system.
fn read_resume(path: &Path, comm: Option<&Rc<rlx_dist::Mpi>>) -> Res<(gpt::GptConfig, ParamStore, usize)> {
    let Some(comm) = comm else { return Ok(gpt::resume(path)?) };
    let mut bytes = vec![];
    let mut failed = None;
    if comm.rank() == 0 {
        match std::fs::read(path) {
            Ok(b) => bytes = b,
            Err(e) => failed = Some(format!("{}: {e}", path.display())),
        }
    }
    comm.broadcast_bytes(0, &mut bytes)?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if bytes.is_empty() {
        return Err(format!("{}: rank 0 could not read the checkpoint (or it is empty)", path.display()).into());
    }
    Ok(gpt::resume_from_bytes(&bytes, path)?)
}

fn run(out: &mut dyn Write, args: &TrainArgs, device: Device, comm: Option<Rc<rlx_dist::Mpi>>) -> Res {
    let (rank, ranks) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
    let root = rank == 0;
    if args.batch == 0 || !args.batch.is_multiple_of(ranks) {
        return Err(
            format!("--batch {} (the global batch) does not split evenly over {ranks} ranks", args.batch).into()
        );
    }
    let text = read_text(args)?;
    let (cfg, mut store, start) = match &args.resume {
        Some(p) => {
            let (cfg, store, step) = read_resume(p, comm.as_ref())?;
            writeln!(out, "resuming {} at step {step}", p.display())?;
            (cfg, store, step)
        }
        None => {
            let cfg = GptConfig {
                ctx: args.ctx,
                layers: args.layers,
                heads: args.heads,
                dim: args.dim,
                ..GptConfig::small(gpt::vocab_of(&text))
            };
            (cfg, ParamStore::new(), 0)
        }
    };
    let tokens = cfg.encode(&text)?;
    let split = tokens.len() * 9 / 10;
    let (train_toks, val_toks) = tokens.split_at(split);
    if val_toks.len() <= cfg.ctx {
        return Err(format!(
            "the text is too short: {} characters leave no held-out window of {} + 1",
            tokens.len(),
            cfg.ctx
        )
        .into());
    }
    // Each rank's graph takes its share of the global batch.
    let (g, specs) = gpt::loss_graph(&cfg, args.batch / ranks)?;
    if args.resume.is_none() {
        store = ParamStore::init(&specs, args.seed)?;
    }
    let nparams: usize = specs.iter().map(|s| s.dims.iter().product::<usize>()).sum();
    writeln!(
        out,
        "char-GPT: {} layers, {} heads, d {}, ctx {}, vocab {}, {:.3}M params; {} training / {} held-out characters; batch {} x {} accum",
        cfg.layers,
        cfg.heads,
        cfg.dim,
        cfg.ctx,
        cfg.vocab_size(),
        nparams as f64 / 1e6,
        train_toks.len(),
        val_toks.len(),
        args.batch,
        args.accum
    )?;
    if let Some(c) = &comm {
        writeln!(
            out,
            "data-parallel over {ranks} {} ranks: {} sequences per rank per micro-step",
            c.kind(),
            args.batch / ranks
        )?;
    }
    let total = args.steps.max(start);
    let lr = Schedule::WarmupCosine { peak: args.lr, warmup: args.warmup, total, end: args.lr / 10.0 };
    let opt = Adam { b2: 0.99, ..Adam::adamw(lr, 0.1) };
    let amp = match args.amp.as_str() {
        "f16" => Some(MixedPrecision::f16()),
        "bf16" => Some(MixedPrecision::bf16()),
        _ => None,
    };
    let clip_norm = (args.clip > 0.0).then_some(args.clip);
    let tc = TrainConfig { accum: args.accum, clip_norm, seed: args.seed, device, amp };
    let t0 = Instant::now();
    let mut step = match &comm {
        // Params and optimizer state are broadcast from rank 0: every rank starts equal.
        Some(c) => Stepper::Dp(Box::new(DataParallelStep::new(&g, &store, &opt, &tc, Box::new(c.clone()))?)),
        None => Stepper::One(Box::new(TrainStep::new(&g, &store, &opt, &tc)?)),
    };
    // Evaluation and samples are rank 0's alone.
    let mut eval = if root { Some(Evaluator::new(&cfg, args.batch, val_toks, device, args.seed)?) } else { None };
    let mut sampler = if root { Some(CharGpt::new(cfg.clone(), &store, device)?) } else { None };
    writeln!(out, "compiled the training step in {:.1} s", t0.elapsed().as_secs_f64())?;
    if root {
        std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    }
    let ckpt = args.out.join("model.safetensors");
    let png = args.out.join("loss.png");

    let bar = if root { ProgressBar::new(total as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30.cyan/blue} step {pos}/{len} {msg} ETA {eta}")?.progress_chars("=> "),
    );
    bar.set_position(start as u64);
    // A seed mix: wrapping, so that no step count overflows it.
    let mut rng = Rng::new(args.seed.wrapping_add((start as u64).wrapping_mul(7919)));
    let (mut losses, mut vals) = (vec![], vec![]);
    let tokens_per_step = (args.batch * cfg.ctx * args.accum) as f64;
    let t_train = Instant::now();
    if let Some(eval) = &mut eval {
        let first_val = eval.loss(&step.params()?)?;
        vals.push((start, first_val));
        let msg =
            format!("step {start}: held-out loss {first_val:.3} (ln vocab = {:.3})", (cfg.vocab_size() as f32).ln());
        bar.suspend(|| writeln!(out, "{msg}"))?;
    }
    let every = (total / 20).max(1);
    for s in start..total {
        // Under data parallelism the loss is the mean over the ranks: the same on every rank, so
        // all stop here alike.
        let loss = step.update(args.accum, || gpt::batch(train_toks, args.batch, cfg.ctx, &mut rng))?;
        if !loss.is_finite() {
            bar.abandon();
            return Err(format!("step {}: the loss is {loss}; lower --lr", s + 1).into());
        }
        losses.push((s + 1, loss));
        let done = s + 1 - start;
        let tps = tokens_per_step * done as f64 / t_train.elapsed().as_secs_f64();
        bar.set_message(format!("loss {loss:.3}  {tps:.0} tok/s"));
        bar.inc(1);
        if bar.is_hidden() && (s + 1) % every == 0 {
            // Not a terminal: a plain progress line instead of the bar.
            let eta = (total - s - 1) as f64 * t_train.elapsed().as_secs_f64() / done as f64;
            writeln!(out, "step {}/{total}  loss {loss:.3}  {tps:.0} tok/s  ETA {eta:.0} s", s + 1)?;
        }
        let last = s + 1 == total;
        let checkpoint = last || (args.sample_every > 0 && (s + 1) % args.sample_every == 0);
        if let (true, Stepper::Dp(dp)) = (checkpoint, &step) {
            // Rank 0's checkpoint stands for every rank: check that they agree (every rank calls it).
            dp.check_in_sync()?;
        }
        if let (true, Some(eval), Some(sampler)) = (checkpoint, &mut eval, &mut sampler) {
            let params = step.params()?;
            let v = eval.loss(&params)?;
            vals.push((s + 1, v));
            sampler.set_params(&params)?;
            let opts = SampleOptions { temperature: 0.8, top_k: 0, seed: args.seed + s as u64 };
            let text = sampler.generate("\n", args.sample_chars, opts, |_| {})?;
            let msg =
                format!("--- step {}: train loss {loss:.3}, held-out loss {v:.3} ---\n{}\n", s + 1, text.trim_end());
            bar.suspend(|| writeln!(out, "{msg}"))?;
            gpt::save(&ckpt, &cfg, &step.state()?, &[("rlx.step", (s + 1).to_string())])?;
            plot(&png, &losses, &vals)?;
        }
    }
    bar.finish();
    let secs = t_train.elapsed().as_secs_f64();
    if let Stepper::Dp(dp) = &step {
        // Every rank holds the params rank 0 saved (checked at each checkpoint, and here for a run
        // that had no step to take).
        dp.check_in_sync()?;
        let st = dp.stats();
        writeln!(
            out,
            "all-reduce: {:.3} ms per step ({} KB per rank per step), {:.1}% of the training time; ranks in sync",
            st.allreduce.as_secs_f64() * 1e3 / st.updates.max(1) as f64,
            st.bytes_per_update / 1024,
            100.0 * st.allreduce.as_secs_f64() / secs.max(1e-9)
        )?;
    }
    let steps_run = total - start;
    writeln!(
        out,
        "trained {steps_run} steps in {secs:.1} s ({:.0} tok/s)",
        tokens_per_step * steps_run as f64 / secs.max(1e-9)
    )?;
    if let (Some(f), Some(l)) = (losses.first(), losses.last()) {
        writeln!(
            out,
            "train loss {:.3} -> {:.3}; held-out {:.3} -> {:.3}",
            f.1,
            l.1,
            vals.first().map_or(f32::NAN, |v| v.1),
            vals.last().map_or(f32::NAN, |v| v.1)
        )?;
    }
    writeln!(out, "checkpoint: {} (params, AdamW state, config)", ckpt.display())?;
    writeln!(out, "loss curve: {} (train blue, held-out red)", png.display())?;
    writeln!(out, "sample more: rlx generate --model {}", ckpt.display())?;
    Ok(())
}

/// Samples a char-GPT checkpoint written by `rlx train` to `out` (what `rlx generate` calls for
/// a `.safetensors` file whose metadata `rlx.kind` is `char-gpt`).
pub fn generate_char_gpt(
    out: &mut impl Write,
    model: &Path,
    prompt: &str,
    n: usize,
    opts: SampleOptions,
    device: Device,
) -> Res {
    let mut m = CharGpt::load(model, device)?;
    write!(out, "{prompt}")?;
    let mut err = None;
    m.generate(prompt, n, opts, |s| {
        if err.is_none() {
            err = write!(out, "{s}").and_then(|_| out.flush()).err();
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    writeln!(out)?;
    Ok(())
}

/// Noto Sans Regular (SIL OFL 1.1, see assets/OFL.txt) cut down to Latin-1 (assets/README.md):
/// plotters' ab_glyph text reads no system font, so the labels come out the same on a machine with
/// no font installed.
const FONT: &[u8] = include_bytes!("../assets/NotoSans-Regular-Latin.ttf");

/// Registers [`FONT`] as plotters' "sans-serif" (the family its axis labels and legends use), once.
fn register_font() -> Res {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *OK
        .get_or_init(|| plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err("the bundled font assets/NotoSans-Regular-Latin.ttf does not parse".into()) }
}

/// Size of the loss-curve image in pixels.
const PLOT_SIZE: (u32, u32) = (800, 480);
/// Blank border around the chart, in pixels (the test finds the text regions from these three).
const PLOT_MARGIN: u32 = 12;
/// Height of the x tick labels and "step" below the plot, in pixels.
const PLOT_X_LABELS: u32 = 48;
/// Width of the y tick labels and "loss" left of the plot, in pixels.
const PLOT_Y_LABELS: u32 = 60;

/// Writes the loss curve to `path` as a PNG: see [`draw_losses`].
fn plot(path: &Path, train: &[(usize, f32)], val: &[(usize, f32)]) -> Res {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, PLOT_SIZE).into_drawing_area();
    draw_losses(&root, train, val)?;
    root.present()?;
    Ok(())
}

/// Draws the loss curve: the train loss of each step in blue, the held-out loss in red with a dot
/// per evaluation, the y axis from 0; axes "step" and "loss", a legend, and the last figures of
/// both in the caption.
fn draw_losses(
    root: &plotters::drawing::DrawingArea<plotters::prelude::BitMapBackend<'_>, plotters::coord::Shift>,
    train: &[(usize, f32)],
    val: &[(usize, f32)],
) -> Res {
    use plotters::prelude::*;
    register_font()?;
    root.fill(&WHITE)?;
    let steps = || train.iter().chain(val).map(|p| p.0 as u32);
    let x_min = steps().min().unwrap_or(0);
    // A range of one step at least: plotters draws nothing on an empty range.
    let x_max = steps().max().unwrap_or(1).max(x_min + 1);
    // 5% headroom keeps the first loss and its dot off the frame.
    let y_max = train.iter().chain(val).map(|p| p.1).filter(|v| v.is_finite()).fold(0.5f32, f32::max) as f64 * 1.05;
    let caption = match (train.last(), val.last()) {
        (Some(t), Some(v)) if t.0 == v.0 => {
            format!("char-gpt: train {:.3}, held-out {:.3} at step {}", t.1, v.1, t.0)
        }
        (Some(t), _) => format!("char-gpt: train {:.3} at step {}", t.1, t.0),
        (None, Some(v)) => format!("char-gpt: held-out {:.3} at step {}", v.1, v.0),
        (None, None) => "char-gpt".to_string(),
    };
    let mut chart = ChartBuilder::on(root)
        .margin(PLOT_MARGIN)
        .caption(caption, ("sans-serif", 22))
        .x_label_area_size(PLOT_X_LABELS)
        .y_label_area_size(PLOT_Y_LABELS)
        .build_cartesian_2d(x_min..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    let blue = BLUE.stroke_width(2);
    let red = RED.stroke_width(2);
    chart
        .draw_series(LineSeries::new(train.iter().map(|&(s, v)| (s as u32, v as f64)), blue))?
        .label("train")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], blue));
    chart
        .draw_series(LineSeries::new(val.iter().map(|&(s, v)| (s as u32, v as f64)), red).point_size(4))?
        .label("held-out")
        .legend(move |(x, y)| {
            EmptyElement::at((x, y)) + PathElement::new([(0, 0), (20, 0)], red) + Circle::new((10, 0), 4, RED.filled())
        });
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_run_writes_a_resumable_checkpoint_a_png_and_samples() {
        let dir = std::env::temp_dir().join(format!("rlx-train-{}", std::process::id()));
        let args = TrainArgs {
            text: None,
            max_chars: Some(20_000),
            steps: 6,
            batch: 4,
            ctx: 16,
            layers: 1,
            heads: 2,
            dim: 16,
            lr: 1e-2,
            warmup: 2,
            clip: 1.0,
            accum: 2,
            seed: 1,
            sample_every: 3,
            sample_chars: 20,
            out: dir.clone(),
            resume: None,
            amp: "f16".into(), // with accumulation and resume: the loss scale is state too
            distributed: false,
            dist_timeout: 60.0,
        };
        let mut log = vec![];
        train(&mut log, &args, Device::Cpu).unwrap();
        let log = String::from_utf8(log).unwrap();
        assert!(log.contains("--- step 3:") && log.contains("--- step 6:"), "{log}");
        let png = std::fs::read(dir.join("loss.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let ckpt = dir.join("model.safetensors");
        let (cfg, store, meta) = gpt::load(&ckpt).unwrap();
        assert_eq!((cfg.layers, cfg.dim, cfg.ctx), (1, 16, 16));
        assert_eq!(meta.get("rlx.step").map(String::as_str), Some("6"));
        assert_eq!(store.get(rlx::nn::train::COUNT).unwrap().to_f64_vec().unwrap(), vec![6.0]);
        // Resume to step 8, then sample the checkpoint as `rlx generate` does.
        let more = TrainArgs { steps: 8, resume: Some(ckpt.clone()), ..args };
        let mut log = vec![];
        train(&mut log, &more, Device::Cpu).unwrap();
        let log = String::from_utf8(log).unwrap();
        assert!(log.contains("resuming") && log.contains("--- step 8:"), "{log}");
        let mut text = vec![];
        let opts = SampleOptions { temperature: 1.0, top_k: 5, seed: 3 };
        generate_char_gpt(&mut text, &ckpt, "HAMLET:", 30, opts, Device::Cpu).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("HAMLET:") && text.chars().count() >= 37, "{text:?}");
        assert!(generate_char_gpt(&mut vec![], &ckpt, "\u{1F600}", 3, opts, Device::Cpu).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Renders a loss curve falling from 4.2 to 1.9 into memory: the upper right of the plot, where
    /// the legend goes, holds no curve.
    fn rendered() -> Vec<u8> {
        use plotters::prelude::*;
        let train: Vec<(usize, f32)> = (1..=600).map(|s| (s, 1.9 + 2.3 * (-(s as f32) / 60.0).exp())).collect();
        let val: Vec<(usize, f32)> =
            [0, 200, 400, 600].iter().map(|&s| (s, 1.95 + 2.3 * (-(s as f32) / 60.0).exp())).collect();
        let (w, h) = PLOT_SIZE;
        let mut buf = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, PLOT_SIZE).into_drawing_area();
            draw_losses(&root, &train, &val).unwrap();
            root.present().unwrap();
        }
        buf
    }

    /// Counts the pixels in columns `x` and rows `y` of an RGB buffer that `is` picks.
    fn count(buf: &[u8], x: std::ops::Range<u32>, y: std::ops::Range<u32>, is: impl Fn(&[u8]) -> bool) -> usize {
        let w = PLOT_SIZE.0;
        y.flat_map(|r| x.clone().map(move |c| ((r * w + c) * 3) as usize)).filter(|&i| is(&buf[i..i + 3])).count()
    }

    #[test]
    fn the_loss_curve_has_a_caption_axis_labels_and_a_legend() {
        let buf = rendered();
        let (w, h) = PLOT_SIZE;
        let dark = |p: &[u8]| p.iter().all(|&c| c < 160);
        let blue = |p: &[u8]| p[2] > 200 && p[0] < 80 && p[1] < 80;
        let red = |p: &[u8]| p[0] > 200 && p[1] < 80 && p[2] < 80;
        // Only text is drawn in these regions: the caption above the plot; the tick labels and
        // "loss" left of the y axis (leaving its tick marks); the tick labels and "step" below the
        // x axis. A glyph of 15 px is some tens of dark pixels: these
        // counts are 1331, 391, 430 with Noto Sans, and 0 with no text.
        let top = PLOT_MARGIN + 26;
        let caption = count(&buf, 0..w, 0..top, dark);
        let y_labels = count(&buf, 0..PLOT_MARGIN + PLOT_Y_LABELS - 8, top..h - PLOT_MARGIN - PLOT_X_LABELS, dark);
        let x_labels = count(&buf, PLOT_MARGIN + PLOT_Y_LABELS..w, h - PLOT_MARGIN - PLOT_X_LABELS + 8..h, dark);
        assert!(caption > 500, "caption: {caption} dark pixels");
        assert!(y_labels > 150, "y labels: {y_labels} dark pixels");
        assert!(x_labels > 150, "x labels: {x_labels} dark pixels");
        // The legend: the swatches of both series and their names, in the upper right corner,
        // which no curve reaches.
        let (lx, ly) = (w - PLOT_MARGIN - 200..w - PLOT_MARGIN, top..top + 90);
        let names = count(&buf, lx.clone(), ly.clone(), dark);
        let (b, r) = (count(&buf, lx.clone(), ly.clone(), blue), count(&buf, lx, ly, red));
        assert!(names > 200 && b > 20 && r > 20, "legend: {names} dark, {b} blue, {r} red pixels");
    }
}
