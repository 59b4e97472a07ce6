//! Prints a GGUF file's metadata and tensor table: `cargo run -p rlx-gguf --example inspect -- FILE`.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: inspect FILE.gguf");
        std::process::exit(2);
    };
    match rlx_gguf::inspect_file(&path) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
