//! The memory plan writes state updates over their params when nothing reads the old value later.

use rlx_ir::{DType, Graph, NodeId, Shape};
use rlx_opt::memory::{fused_in_place, plan_with_updates};
use rlx_opt::{SlotKind, fuse_elementwise};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

fn lowered(g: &Graph) -> (Graph, Vec<(NodeId, NodeId)>) {
    let (low, map) = g.lower_updates();
    let params = low.params();
    let pairs =
        map.iter().map(|(name, o)| (params.iter().find(|(_, n)| n == name).unwrap().0, low.outputs()[*o])).collect();
    (low, pairs)
}

fn cache(read_old_later: bool) -> Graph {
    let mut g = Graph::new("cache");
    let c = g.param("cache", f32s(&[4, 8]));
    let row = g.input("row", f32s(&[1, 8]));
    let pos = g.input("pos", Shape::scalar(DType::I64));
    let new = g.dynamic_update_slice(c, row, pos, 0);
    g.update_param(c, new);
    let mut out = g.sum(new, &[0, 1], false);
    if read_old_later {
        let old = g.sum(c, &[0, 1], false);
        out = g.add(out, old);
    }
    g.set_outputs(vec![out]);
    g
}

#[test]
fn a_cache_write_lands_on_the_param() {
    let (g, pairs) = lowered(&cache(false));
    let plan = plan_with_updates(&g, &fused_in_place, &pairs).unwrap();
    let (p, v) = pairs[0];
    assert_eq!(plan.slots[v.index()].kind, SlotKind::InPlace(p));
    assert_eq!(plan.slots[v.index()].offset, plan.slots[p.index()].offset);
}

#[test]
fn a_later_read_of_the_old_value_keeps_a_separate_block() {
    let (g, pairs) = lowered(&cache(true));
    let plan = plan_with_updates(&g, &fused_in_place, &pairs).unwrap();
    let (p, v) = pairs[0];
    assert_eq!(plan.slots[v.index()].kind, SlotKind::Own);
    assert_ne!(plan.slots[v.index()].offset, plan.slots[p.index()].offset);
}

#[test]
fn a_fused_optimizer_step_lands_on_the_param() {
    let mut g = Graph::new("sgd");
    let p = g.param("p", f32s(&[16]));
    let grad = g.input("grad", f32s(&[16]));
    let lr = g.scalar(0.1, DType::F32);
    let step = g.mul(grad, lr);
    let next = g.sub(p, step);
    g.update_param(p, next);
    let loss = g.sum(grad, &[0], false);
    g.set_outputs(vec![loss]);
    let (low, _) = g.lower_updates();
    let (fused, _) = fuse_elementwise(&low, &|_, _| true).unwrap();
    let params = fused.params();
    let p = params[0].0;
    let v = *fused.outputs().last().unwrap();
    let plan = plan_with_updates(&fused, &fused_in_place, &[(p, v)]).unwrap();
    assert_eq!(plan.slots[v.index()].kind, SlotKind::InPlace(p), "{}", fused.to_text());
}
