#!/usr/bin/env bash
# Installs two XLA CPU PJRT plugins from PyPI (no dependencies) and prints their .so paths, one per
# line: xla-cpu-pjrt (C API 0.81, ships pjrt_c_api.h) and lammps-jax-pjrt-cpu (C API 0.115), so
# rlx-pjrt is tested against an older and a newer plugin than the header it was written from.
set -euo pipefail
for pkg in xla-cpu-pjrt lammps-jax-pjrt-cpu; do
    mod=${pkg//-/_}
    if ! python3 -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('xla_plugins.xla_cpu_pjrt' if '$mod'=='xla_cpu_pjrt' else '$mod') is None)" 2>/dev/null; then
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-deps --disable-pip-version-check "$pkg" >&2 \
            || { echo "ci: could not install $pkg" >&2; exit 1; }
    fi
done
python3 - <<'PY'
import importlib.util, pathlib
for mod, so in [("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so"), ("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so")]:
    spec = importlib.util.find_spec(mod)
    path = pathlib.Path(spec.origin).parent / so
    assert path.exists(), path
    print(path)
PY
