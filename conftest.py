"""Project-wide pytest setup (the repository root is pytest's rootdir, so this applies everywhere).

- Notebook kernels inherit this process's environment: make them quiet, offline and reproducible.
- `pytest --nbval book/`: use book/nbval_sanitize.cfg by absolute path, so the bare command also
  works when pytest is started from a subfolder (a relative --nbval-sanitize-with would break).
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent
SANITIZE_FILE = REPO_ROOT / "book" / "nbval_sanitize.cfg"

KERNEL_ENV = {
    "TQDM_DISABLE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_OFFLINE": "1",
    "PYTHONHASHSEED": "0",
    # OpenMP threads sleep instead of spinning while they wait: on a shared or busy CPU, spinning torch
    # threads made small forward passes several times slower (a 64M-model chapter: ~80 s -> ~53 s).
    "OMP_WAIT_POLICY": "PASSIVE",
}
for _name, _value in KERNEL_ENV.items():
    os.environ.setdefault(_name, _value)


def pytest_report_header(config):
    """Which CPU kernels PyTorch runs (AVX512 / AVX2 / DEFAULT); test_all.sh tests two."""
    import torch
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    kernels = torch.backends.cpu.get_cpu_capability()
    return (f"torch {torch.__version__}, CPU kernels {kernels}"
            + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else ""))


def pytest_configure(config):
    option = config.option
    nbval_active = getattr(option, "nbval", False) or getattr(option, "nbval_lax", False)
    if nbval_active and not getattr(option, "nbval_sanitize_with", None):
        option.nbval_sanitize_with = str(SANITIZE_FILE)
