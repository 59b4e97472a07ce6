//! Fuzzes the GGUF reader: any bytes must parse or give an error, never panic or over-allocate;
//! parsed tensors are dequantized and the header listed, to reach every code path.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = rlx_gguf::GgufFile::from_bytes(data.to_vec()) {
        for t in file.tensors() {
            let _ = t.to_f32();
        }
        let _ = rlx_gguf::inspect(file.gguf());
    }
});
