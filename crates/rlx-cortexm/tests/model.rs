//! The layer table and arena: a two-layer model runs in place over one buffer; bad slots, short
//! arenas and wrong lengths are errors, never panics.

use rlx_cortexm::kernels::{self, FcParams, OutQuant};
use rlx_cortexm::requant::Requant;
use rlx_cortexm::{Error, Layer, Model, Op, Slot};

const M: [i32; 1] = [1 << 30];
const S: [i32; 1] = [1]; // multiplier 1.0
const W: [i8; 4] = [1, 2, 3, 4]; // [2 out, 2 in]
const B: [i32; 2] = [10, -10];

fn fc() -> FcParams<'static> {
    FcParams {
        batch: 1,
        inputs: 2,
        outputs: 2,
        weights: &W,
        bias: &B,
        input_offset: 0,
        requant: Requant { multiplier: &M, shift: &S },
        out: OutQuant::none(0),
    }
}

#[test]
fn a_chain_runs_over_one_arena() {
    // x at 0..2, h at 4..6, y back at 0..2 (x is dead by then).
    let layers = [
        Layer { op: Op::FullyConnected(fc()), inputs: [Slot::new(0, 2); 2], output: Slot::new(4, 2) },
        Layer { op: Op::FullyConnected(fc()), inputs: [Slot::new(4, 2); 2], output: Slot::new(0, 2) },
    ];
    let m = Model { layers: &layers, arena_size: 8, input: Slot::new(0, 2), output: Slot::new(0, 2) };
    let mut arena = [0i8; 8];
    m.input_mut(&mut arena).unwrap().copy_from_slice(&[3, -1]);
    m.invoke(&mut arena).unwrap();
    // h = [3 - 2 + 10, 9 - 4 - 10] = [11, -5]; y = [11 - 10 + 10, 33 - 20 - 10] = [11, 3].
    assert_eq!(&arena[4..6], &[11, -5]);
    assert_eq!(m.output(&arena).unwrap(), &[11, 3]);
}

#[test]
fn bad_plans_and_lengths_are_errors() {
    let overlapping = [Layer { op: Op::FullyConnected(fc()), inputs: [Slot::new(0, 2); 2], output: Slot::new(1, 2) }];
    let m = Model { layers: &overlapping, arena_size: 4, input: Slot::new(0, 2), output: Slot::new(1, 2) };
    let mut arena = [0i8; 4];
    assert_eq!(
        m.invoke(&mut arena),
        Err(Error::Param { op: "fully_connected", what: "the output slot overlaps an input" })
    );

    let m = Model { layers: &overlapping, arena_size: 16, input: Slot::new(0, 2), output: Slot::new(1, 2) };
    assert_eq!(m.invoke(&mut arena), Err(Error::Arena { need: 16, got: 4 }));

    let outside = [Layer { op: Op::FullyConnected(fc()), inputs: [Slot::new(0, 2); 2], output: Slot::new(3, 2) }];
    let m = Model { layers: &outside, arena_size: 4, input: Slot::new(0, 2), output: Slot::new(3, 2) };
    assert_eq!(m.invoke(&mut arena), Err(Error::Arena { need: 5, got: 4 }));

    let mut out = [0i8; 3];
    let e = kernels::fully_connected(&fc(), &[1, 2], &mut out).unwrap_err();
    assert_eq!(e, Error::Shape { op: "fully_connected", what: "output", expected: 2, got: 3 });
    assert_eq!(e.to_string(), "fully_connected: output has 3 elements, expected 2");
    let bad = FcParams { requant: Requant { multiplier: &[1, 2, 3], shift: &[0, 0, 0] }, ..fc() };
    assert!(matches!(kernels::fully_connected(&bad, &[1, 2], &mut [0; 2]), Err(Error::Shape { what: "requant", .. })));
    // A shift past 31 bits would overflow the requantization's shifts: refused, not a panic.
    let bad = FcParams { requant: Requant { multiplier: &[1 << 30], shift: &[40] }, ..fc() };
    assert!(matches!(kernels::fully_connected(&bad, &[1, 2], &mut [0; 2]), Err(Error::Param { .. })));
}
