//! The static arena: each tensor lives from the layer that writes it to the last layer that
//! reads it (the model input from the start, the output to the end); tensors are placed largest
//! first at the lowest 4-byte-aligned offset that no tensor with an overlapping life holds
//! (TFLite Micro's greedy planner). A layer's output never shares bytes with its input, since
//! both are live at that layer. Reshapes share their source's slot.

use crate::qmodel::QModel;
use rlx_cortexm::Slot;

/// The plan: one slot per tensor and the arena size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Slot of each tensor of the model.
    pub slots: Vec<Slot>,
    /// Arena bytes.
    pub arena_size: usize,
    /// Bytes if every tensor had its own slot (for comparison).
    pub naive_size: usize,
}

const ALIGN: usize = 4;

fn root(q: &QModel, t: usize) -> usize {
    q.tensors[t].alias_of.unwrap_or(t)
}

/// Plans `q`'s arena.
pub fn plan(q: &QModel) -> Plan {
    let n = q.tensors.len();
    let last = q.layers.len();
    // (first, last) layer index of each root tensor's life.
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut touch = |t: usize, at: usize| {
        let e = life[t].get_or_insert((at, at));
        *e = (e.0.min(at), e.1.max(at));
    };
    touch(root(q, q.input), 0);
    touch(root(q, q.output), last);
    for (i, l) in q.layers.iter().enumerate() {
        touch(root(q, l.input), i);
        if let Some(b) = l.input2 {
            touch(root(q, b), i);
        }
        touch(root(q, l.output), i);
    }
    let mut order: Vec<usize> = (0..n).filter(|&t| life[t].is_some()).collect();
    order.sort_by_key(|&t| (std::cmp::Reverse(q.tensors[t].len()), t));
    let mut placed: Vec<(usize, Slot)> = vec![];
    let mut slots = vec![Slot::new(0, 0); n];
    for t in order {
        let (a0, a1) = life[t].unwrap_or((0, 0));
        let len = q.tensors[t].len();
        let mut busy: Vec<Slot> = placed
            .iter()
            .filter(|(u, _)| life[*u].is_some_and(|(b0, b1)| a0 <= b1 && b0 <= a1))
            .map(|(_, s)| *s)
            .collect();
        busy.sort_by_key(|s| s.offset);
        let mut offset = 0;
        for s in busy {
            if offset + len <= s.offset {
                break;
            }
            offset = offset.max(s.end().div_ceil(ALIGN) * ALIGN);
        }
        slots[t] = Slot::new(offset, len);
        placed.push((t, slots[t]));
    }
    for t in 0..n {
        let r = root(q, t);
        if r != t {
            slots[t] = Slot::new(slots[r].offset, q.tensors[t].len());
        }
    }
    let arena_size = slots.iter().map(|s| s.end()).max().unwrap_or(0).div_ceil(ALIGN) * ALIGN;
    let naive_size = (0..n).filter(|&t| root(q, t) == t).map(|t| q.tensors[t].len().div_ceil(ALIGN) * ALIGN).sum();
    Plan { slots, arena_size, naive_size }
}
