//! Builds the C ABI shim (`shim/shim.cpp`, C++20) against an installed libmlx into a shared
//! library that the crate loads at run time, so nothing that depends on rlx-mlx links libmlx.
//!
//! libmlx is found through `MLX_DIR` (the directory holding `include/mlx/mlx.h` and `lib/`), else
//! `python3 -m mlx --cmake-dir` (the `mlx[cpu]` wheel on Linux, the `mlx` wheel on macOS). Without
//! it the crate still builds: `Device::Mlx` is then unavailable with the reason set here.

use std::path::{Path, PathBuf};
use std::process::Command;

fn mlx_root() -> Result<PathBuf, String> {
    let start = match std::env::var_os("MLX_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let out = Command::new("python3")
                .args(["-m", "mlx", "--cmake-dir"])
                .output()
                .map_err(|e| format!("python3 -m mlx --cmake-dir: {e}"))?;
            if !out.status.success() {
                return Err("python3 -m mlx --cmake-dir failed (is the mlx wheel installed?)".into());
            }
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    // The CMake dir sits below the package root (`share/cmake/MLX`), or is the root itself.
    start
        .ancestors()
        .take(4)
        .find(|d| d.join("include/mlx/mlx.h").exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("no include/mlx/mlx.h at or above {}", start.display()))
}

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.cpp");
    println!("cargo:rerun-if-env-changed=MLX_DIR");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let built = mlx_root().and_then(|root| {
        let lib = root.join("lib");
        let so = out.join("librlx_mlx_shim.so");
        let compiler = cc::Build::new().cpp(true).get_compiler();
        let status = compiler
            .to_command()
            .args(["-std=c++20", "-O2", "-fPIC", "-shared", "-o"])
            .arg(&so)
            .arg("shim/shim.cpp")
            .arg(format!("-I{}", root.join("include").display()))
            .arg(format!("-L{}", lib.display()))
            .arg("-lmlx")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .status()
            .map_err(|e| format!("running the C++ compiler: {e}"))?;
        if !status.success() {
            return Err(format!("the C++20 compiler failed on shim/shim.cpp against {}", root.display()));
        }
        Ok(so)
    });
    match built {
        Ok(so) => {
            // A reinstalled or upgraded libmlx rebuilds the shim.
            if let Ok(root) = mlx_root() {
                println!("cargo:rerun-if-changed={}", root.join("include/mlx/mlx.h").display());
            }
            println!("cargo:rustc-env=RLX_MLX_SHIM={}", so.display());
            println!("cargo:rustc-env=RLX_MLX_MISSING=");
        }
        Err(why) => {
            // A path that never exists: cargo reruns this script on every build until libmlx is
            // found, so installing it afterwards needs no `cargo clean` (the check is one python
            // call).
            println!("cargo:rerun-if-changed={}", out.join("libmlx-not-found").display());
            println!(
                "cargo:warning=rlx-mlx: libmlx not found ({why}); Device::Mlx will be unavailable. Install it with `pip install \"mlx[cpu]\"` (Linux) or `pip install mlx` (macOS), or set MLX_DIR"
            );
            println!("cargo:rustc-env=RLX_MLX_SHIM=");
            println!(
                "cargo:rustc-env=RLX_MLX_MISSING=libmlx was not found when rlx-mlx was built ({why}); install it with `pip install \"mlx[cpu]\"` (Linux) or `pip install mlx` (macOS), or set MLX_DIR, then rebuild"
            );
        }
    }
}
