//! Next-token sampling: greedy, temperature, top-k, top-p, repetition penalty, seeded.

use rlx_ir::{Error, Result};

/// Sampling settings. `temperature <= 0` is greedy (argmax, ties to the lowest id).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits; 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p (1: all).
    pub top_p: f32,
    /// llama.cpp's repetition penalty over the last `repeat_last_n` tokens (1: off): a positive
    /// logit is divided by it, a negative one multiplied.
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// The RNG seed.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, repeat_last_n: 64, seed: 0 }
    }
}

impl SamplerConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        let bad = |r: String| Err(Error::eval("sampler", r));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!("temperature must be finite and >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(format!("repetition_penalty must be finite and > 0, got {}", self.repetition_penalty));
        }
        Ok(())
    }
}

/// SplitMix64: a small, fast, seedable generator (statistically fine for sampling).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Picks next tokens from logits under a `SamplerConfig`.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
}

/// The index of the largest value (the first one on ties); NaN never wins.
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] || v[best].is_nan() {
            best = i;
        }
    }
    best
}

impl Sampler {
    /// A sampler; an error if the config is out of range.
    pub fn new(cfg: SamplerConfig) -> Result<Self> {
        cfg.validate()?;
        let rng = Rng::new(cfg.seed);
        Ok(Sampler { cfg, rng })
    }

    /// The config.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// The next token given the logits and the tokens so far (for the repetition penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::eval("sampler", "no logits"));
        }
        if let Some(i) = logits.iter().position(|x| x.is_nan()) {
            return Err(Error::eval("sampler", format!("logit {i} is NaN")));
        }
        if self.cfg.temperature <= 0.0 && self.cfg.repetition_penalty == 1.0 {
            return Ok(argmax(logits) as u32);
        }
        let mut l = logits.to_vec();
        if self.cfg.repetition_penalty != 1.0 {
            let recent = &history[history.len().saturating_sub(self.cfg.repeat_last_n)..];
            let mut seen = vec![false; l.len()];
            for &t in recent {
                if let Some(s) = seen.get_mut(t as usize)
                    && !*s
                {
                    *s = true;
                    let x = &mut l[t as usize];
                    *x = if *x > 0.0 { *x / self.cfg.repetition_penalty } else { *x * self.cfg.repetition_penalty };
                }
            }
        }
        if self.cfg.temperature <= 0.0 {
            return Ok(argmax(&l) as u32);
        }
        // Candidates by descending logit (stable: lower id first on ties), cut to top-k.
        let mut idx: Vec<usize> = (0..l.len()).collect();
        let order = |&a: &usize, &b: &usize| l[b].total_cmp(&l[a]).then(a.cmp(&b));
        if self.cfg.top_k > 0 && self.cfg.top_k < idx.len() {
            // Partition out the k best first: the full vocabulary is never sorted.
            idx.select_nth_unstable_by(self.cfg.top_k - 1, order);
            idx.truncate(self.cfg.top_k);
        }
        idx.sort_unstable_by(order);
        let t = self.cfg.temperature as f64;
        let m = l[idx[0]] as f64;
        let mut p: Vec<f64> = idx.iter().map(|&i| ((l[i] as f64 - m) / t).exp()).collect();
        let sum: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= sum);
        if self.cfg.top_p < 1.0 {
            let mut acc = 0.0;
            let keep = p
                .iter()
                .position(|&x| {
                    acc += x;
                    acc >= self.cfg.top_p as f64
                })
                .map_or(p.len(), |i| i + 1);
            p.truncate(keep);
            let s: f64 = p.iter().sum();
            p.iter_mut().for_each(|x| *x /= s);
        }
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for (k, &x) in p.iter().enumerate() {
            acc += x;
            if r < acc {
                return Ok(idx[k] as u32);
            }
        }
        Ok(idx[p.len() - 1] as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(SamplerConfig { temperature, top_k, top_p, seed, ..Default::default() }).unwrap()
    }

    #[test]
    fn greedy_takes_the_argmax_and_the_first_on_ties() {
        let mut s = sampler(0.0, 0, 1.0, 0);
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 3.0], &[]).unwrap(), 1);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let mut s = sampler(5.0, 1, 1.0, 9);
        for _ in 0..50 {
            assert_eq!(s.sample(&[0.0, 0.5, 0.4], &[]).unwrap(), 1);
        }
    }

    #[test]
    fn frequencies_follow_the_softmax_and_the_seed_repeats() {
        // logits ln(1), ln(3): probabilities 1/4 and 3/4.
        let logits = [0.0f32, 3f32.ln()];
        let mut s = sampler(1.0, 0, 1.0, 42);
        let draws: Vec<u32> = (0..4000).map(|_| s.sample(&logits, &[]).unwrap()).collect();
        let ones = draws.iter().filter(|&&t| t == 1).count() as f64 / 4000.0;
        assert!((ones - 0.75).abs() < 0.03, "{ones}");
        let mut again = sampler(1.0, 0, 1.0, 42);
        let redo: Vec<u32> = (0..4000).map(|_| again.sample(&logits, &[]).unwrap()).collect();
        assert_eq!(draws, redo);
    }

    #[test]
    fn top_p_drops_the_tail() {
        // Probabilities ~0.84, 0.11, 0.04: top_p 0.8 keeps only the first.
        let mut s = sampler(1.0, 0, 0.8, 3);
        for _ in 0..100 {
            assert_eq!(s.sample(&[3.0, 1.0, 0.0], &[]).unwrap(), 0);
        }
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let cfg = SamplerConfig { repetition_penalty: 2.0, ..Default::default() };
        let mut s = Sampler::new(cfg).unwrap();
        // 2.0 / 2 = 1.0 < 1.5: token 0 loses to token 1 once seen; a negative logit gets worse.
        assert_eq!(s.sample(&[2.0, 1.5, -1.0], &[0]).unwrap(), 1);
        assert_eq!(s.sample(&[2.0, 1.5, -1.0], &[]).unwrap(), 0);
    }

    #[test]
    fn bad_settings_and_nan_logits_are_errors() {
        assert!(Sampler::new(SamplerConfig { top_p: 0.0, ..Default::default() }).is_err());
        assert!(Sampler::new(SamplerConfig { temperature: -1.0, ..Default::default() }).is_err());
        let mut s = sampler(0.0, 0, 1.0, 0);
        assert!(s.sample(&[0.0, f32::NAN], &[]).is_err());
    }
}
