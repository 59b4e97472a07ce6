//! The CPU's cache sizes, read once at first use (Linux sysfs), for blocking choices that depend
//! on what the hierarchy can hold rather than on the host the GEMM was tuned on.

use std::sync::OnceLock;

/// The L2 size of one core assumed where sysfs does not say (1 MiB: Zen 4, Ice Lake server).
const FALLBACK_L2_BYTES: usize = 1 << 20;

/// Bytes of L2 cache per core of CPU 0 (sysfs `cache/index*/` with `level` 2), or 1 MiB where
/// the system does not report it.
pub fn l2_bytes() -> usize {
    static L2: OnceLock<usize> = OnceLock::new();
    *L2.get_or_init(|| {
        read_level_bytes(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache"), 2).unwrap_or(FALLBACK_L2_BYTES)
    })
}

/// The size of the data or unified cache of `level` under a sysfs `cache` directory.
fn read_level_bytes(dir: &std::path::Path, level: u32) -> Option<usize> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    (0..8).find_map(|i| {
        let idx = dir.join(format!("index{i}"));
        let lv: u32 = read(idx.join("level"))?.parse().ok()?;
        let ty = read(idx.join("type"))?;
        (lv == level && ty != "Instruction").then(|| parse_size(&read(idx.join("size"))?)).flatten()
    })
}

/// A sysfs cache size: `2048K`, `32M`, or plain bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|v| v * mul).filter(|&v| v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("2048K"), Some(2 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("0K"), None);
        assert_eq!(parse_size("big"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn the_level_is_found_among_the_index_directories() {
        let dir = std::env::temp_dir().join(format!("rlx-caches-{}", std::process::id()));
        for (i, (level, ty, size)) in
            [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K")].into_iter().enumerate()
        {
            let idx = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&idx).unwrap();
            std::fs::write(idx.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(idx.join("type"), format!("{ty}\n")).unwrap();
            std::fs::write(idx.join("size"), format!("{size}\n")).unwrap();
        }
        assert_eq!(read_level_bytes(&dir, 2), Some(2 << 20));
        assert_eq!(read_level_bytes(&dir, 1), Some(48 << 10));
        assert_eq!(read_level_bytes(&dir, 3), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(l2_bytes() >= 64 << 10, "this machine's L2 or the fallback");
    }
}
