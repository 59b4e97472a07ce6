//! Seeded initializers and the small deterministic generator behind them.

use rlx_ir::{DType, Error, HostTensor, Result};
use serde::{Deserialize, Serialize};

/// A small, fast, seedable generator (splitmix64). The same seed gives the same stream on
/// every machine.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed ^ 0x9E37_79B9_7F4A_7C15 }
    }

    /// A generator for one named stream: mixes `name` into `seed` (FNV-1a), so a param's values
    /// do not depend on the order params were declared in.
    pub fn for_name(seed: u64, name: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 11) as u128 * n as u128) >> 53) as usize
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// How a parameter starts. Fan-in/fan-out follow the JAX convention: for a matrix `[in, out]`
/// fan-in is `in`; for a conv kernel `[out, in, kh, kw]` fan-in is `in * kh * kw`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element equal to the value.
    Constant(f64),
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
    /// Uniform in [lo, hi).
    Uniform(f64, f64),
    /// Glorot/Xavier uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
    XavierUniform,
    /// Glorot/Xavier normal: std = sqrt(2 / (fan_in + fan_out)).
    XavierNormal,
    /// He/Kaiming uniform for ReLU: U(-a, a), a = sqrt(6 / fan_in).
    KaimingUniform,
    /// He/Kaiming normal for ReLU: std = sqrt(2 / fan_in).
    KaimingNormal,
}

/// Fan-in and fan-out of a parameter shape (see `Init`).
pub fn fans(dims: &[usize]) -> (f64, f64) {
    match dims {
        [] => (1.0, 1.0),
        [n] => (*n as f64, *n as f64),
        [i, o] => (*i as f64, *o as f64),
        [o, i, rest @ ..] => {
            let r: usize = rest.iter().product();
            ((i * r) as f64, (o * r) as f64)
        }
    }
}

impl Init {
    /// Draws a tensor of `dims` (f32) from the stream of `(seed, name)`.
    pub fn sample(&self, name: &str, dims: &[usize], seed: u64) -> Result<HostTensor> {
        let n: usize = dims.iter().product();
        let mut rng = Rng::for_name(seed, name);
        let (fi, fo) = fans(dims);
        let uni = |rng: &mut Rng, a: f64| (0..n).map(|_| -a + 2.0 * a * rng.uniform()).collect::<Vec<_>>();
        let nor = |rng: &mut Rng, s: f64| (0..n).map(|_| s * rng.normal()).collect::<Vec<_>>();
        let v = match *self {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Constant(c) => vec![c; n],
            Init::Normal(s) => nor(&mut rng, s),
            Init::Uniform(lo, hi) => {
                if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
                    return Err(Error::eval("init", format!("param `{name}`: uniform range [{lo}, {hi}) is empty")));
                }
                (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect()
            }
            Init::XavierUniform => uni(&mut rng, (6.0 / (fi + fo)).sqrt()),
            Init::XavierNormal => nor(&mut rng, (2.0 / (fi + fo)).sqrt()),
            Init::KaimingUniform => uni(&mut rng, (6.0 / fi).sqrt()),
            Init::KaimingNormal => nor(&mut rng, (2.0 / fi).sqrt()),
        };
        HostTensor::from_f64(dims, DType::F32, &v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
        (m, var.sqrt())
    }

    #[test]
    fn normal_has_the_asked_moments() {
        let t = Init::Normal(0.02).sample("w", &[200, 100], 1).unwrap();
        let (m, s) = stats(&t.to_f64_vec().unwrap());
        assert!(m.abs() < 5e-4, "mean {m}");
        assert!((s - 0.02).abs() < 5e-4, "std {s}");
    }

    #[test]
    fn xavier_and_kaiming_bounds_follow_the_fans() {
        let t = Init::XavierUniform.sample("w", &[300, 100], 3).unwrap().to_f64_vec().unwrap();
        let a = (6.0f64 / 400.0).sqrt();
        assert!(t.iter().all(|x| x.abs() <= a));
        assert!(t.iter().any(|x| x.abs() > 0.9 * a));
        let k = Init::KaimingNormal.sample("k", &[64, 8, 3, 3], 3).unwrap().to_f64_vec().unwrap();
        let (_, s) = stats(&k);
        assert!((s - (2.0f64 / 72.0).sqrt()).abs() < 0.01, "std {s}");
    }

    #[test]
    fn streams_depend_on_seed_and_name_only() {
        let a = Init::Normal(1.0).sample("a", &[8], 7).unwrap();
        assert_eq!(a, Init::Normal(1.0).sample("a", &[8], 7).unwrap());
        assert_ne!(a, Init::Normal(1.0).sample("b", &[8], 7).unwrap());
        assert_ne!(a, Init::Normal(1.0).sample("a", &[8], 8).unwrap());
        assert!(Init::Uniform(1.0, 1.0).sample("u", &[2], 0).is_err());
    }
}
