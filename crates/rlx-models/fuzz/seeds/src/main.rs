//! Writes `corpus/gguf_tokenizer/<name>.gguf`: the metadata of each GGUF model fixture without
//! its tensors. The tokenizer lives in the metadata; the tensor data would only make every input
//! hundreds of KB for the fuzzer to mutate.
use rlx_gguf::{Gguf, GgufWriter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = "corpus/gguf_tokenizer";
    std::fs::create_dir_all(out)?;
    let mut n = 0;
    for entry in std::fs::read_dir("../tests/fixtures/llm")? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("gguf") {
            continue;
        }
        let g = Gguf::parse(&std::fs::read(&path)?)?;
        let mut w = GgufWriter::with_version(g.version())?;
        for (k, v) in g.metadata() {
            w.add_metadata(k.clone(), v.clone())?;
        }
        let name = path.file_name().ok_or("no file name")?.to_string_lossy().to_string();
        let bytes = w.to_bytes()?;
        println!("{name}: {} bytes of metadata", bytes.len());
        std::fs::write(format!("{out}/{name}"), bytes)?;
        n += 1;
    }
    println!("{n} seeds written");
    Ok(())
}
