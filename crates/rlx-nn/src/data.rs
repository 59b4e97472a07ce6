//! Small bundled data sets.

use crate::init::Rng;

/// The scikit-learn digits set (UCI optical digits, CC BY 4.0): 1797 images of 8x8 pixels
/// (0..16) and their labels; made by tools/digits_data.py.
const DIGITS: &[u8] = include_bytes!("../../../data/digits.u8");

/// Digits split by a seeded shuffle: `(x_train, y_train, x_test, y_test)`, pixels scaled to
/// [0, 1] (`x` rows of 64), `test_frac` of the samples held out.
pub fn digits(seed: u64, test_frac: f64) -> (Vec<f32>, Vec<i64>, Vec<f32>, Vec<i64>) {
    let n = DIGITS.len() / 65;
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        idx.swap(i, rng.below(i + 1));
    }
    let n_test = ((n as f64) * test_frac.clamp(0.0, 1.0)).round() as usize;
    let (mut xtr, mut ytr, mut xte, mut yte) = (vec![], vec![], vec![], vec![]);
    for (k, &i) in idx.iter().enumerate() {
        let row = &DIGITS[i * 65..(i + 1) * 65];
        let (x, y) = if k < n - n_test { (&mut xtr, &mut ytr) } else { (&mut xte, &mut yte) };
        x.extend(row[..64].iter().map(|&p| p as f32 / 16.0));
        y.push(row[64] as i64);
    }
    (xtr, ytr, xte, yte)
}
