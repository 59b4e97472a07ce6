//! Prints the op x transform coverage table: `cargo run -p rlx-autodiff --example coverage`.

fn main() {
    print!("{}", rlx_autodiff::coverage_table());
}
