"""The GPU-machine scripts, as far as a machine without a GPU can test them.

tools/gpu_wheels.sh (run where pip reaches the registry) prepares the wheels; tools/gpu_check.sh (run on the GPU
machine, which has no network) installs them and runs the tests, the chapters and the benchmark. Here: both
parse; the pins of tools/gpu-requirements.txt are requirements.txt's; the wheel set resolves for CPython 3.12
manylinux without pulling a torch (slow: asks the registry, skipped when it cannot be reached); a folder holding
another set is not written over; and gpu_check.sh --smoke --no-install runs on this CPU, says so, and reports
each phase.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
WHEELS = REPO_ROOT / "tools" / "gpu_wheels.sh"
CHECK = REPO_ROOT / "tools" / "gpu_check.sh"
GPU_REQUIREMENTS = REPO_ROOT / "tools" / "gpu-requirements.txt"
# the GPU machine's own, on purpose (tools/gpu-requirements.txt says why): requirements.txt pins them, this does not
LEFT_TO_THE_GPU_MACHINE = {"torch", "numpy", "matplotlib"}
# what a registry that cannot be reached looks like in pip's output
UNREACHABLE = re.compile(r"NewConnectionError|ConnectTimeout|ConnectionError|Max retries exceeded|Temporary failure "
                         r"in name resolution|Name or service not known|Network is unreachable|No route to host|"
                         r"Connection refused|Read ?timed out|Could not fetch URL")


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path):
    """{name: version} of the `name==version` lines (extras dropped), and the names of all requirement lines."""
    pins, names = {}, set()
    for line in path.read_text().splitlines():
        text = line.split("#")[0].strip()
        match = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(==\s*([^\s;]+))?", text)
        if not text or text.startswith("-") or not match:
            continue
        names.add(_norm(match.group(1)))
        if match.group(4):
            pins[_norm(match.group(1))] = match.group(4)
    return pins, names


def _run(cmd, timeout, **kwargs):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.mark.parametrize("script", [WHEELS, CHECK], ids=lambda p: p.name)
def test_script_parses_and_explains_itself(script):
    assert _run(["bash", "-n", script], 30).returncode == 0
    shown = _run(["bash", script, "--help"], 30)
    assert shown.returncode == 0 and "--" in shown.stdout, shown.stderr


def test_gpu_requirements_keep_the_pins_of_requirements_txt():
    ours, our_names = _pins(GPU_REQUIREMENTS)
    theirs, _ = _pins(REPO_ROOT / "requirements.txt")
    assert "torch" not in our_names, "the GPU machine keeps its own torch"
    assert ours, "no pinned line in tools/gpu-requirements.txt"
    for name, version in ours.items():
        assert theirs.get(name) == version, f"{name}=={version} here, requirements.txt says {theirs.get(name)}"
    unpinned = {n for n in our_names - set(ours) if n in theirs}
    assert unpinned <= LEFT_TO_THE_GPU_MACHINE, f"requirements.txt pins {sorted(unpinned)}: pin them here too"
    for name in ["transformers", "tokenizers", "safetensors", "accelerate", "nbval", "nbclient", "ipykernel", "pytest"]:
        assert name in ours, f"{name} must travel at requirements.txt's version"


def test_a_folder_holding_another_set_is_not_written_over(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "something-1.0-py3-none-any.whl").write_text("not ours")
    result = _run(["bash", WHEELS, folder], 60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "holds another set" in result.stderr and "--force" in result.stderr
    assert [p.name for p in folder.iterdir()] == ["something-1.0-py3-none-any.whl"]


@pytest.mark.slow
def test_the_wheel_set_resolves_for_cp312_manylinux_without_torch():
    env = {**os.environ, "PIP_DEFAULT_TIMEOUT": "20", "PIP_RETRIES": "1"}
    result = _run(["bash", WHEELS, "--resolve-only"], 300, env=env)
    if result.returncode != 0:
        if UNREACHABLE.search(result.stderr):
            pytest.skip("the package registry cannot be reached: " + UNREACHABLE.search(result.stderr).group(0))
        pytest.fail(f"resolution failed:\n{result.stderr[-3000:]}")
    resolved = {}
    for line in result.stdout.split():
        name, _, version = line.partition("==")
        resolved[_norm(name)] = version
    torchlike = [n for n in resolved if re.match(r"^(torch|torchvision|torchaudio|triton|nvidia-.*)$", n)]
    assert not torchlike, f"the set pulls {torchlike}: the GPU machine's torch must stay"
    assert "torch" in result.stderr  # the stand-in torch was left out, not forgotten
    pins, _ = _pins(GPU_REQUIREMENTS)
    for name, version in pins.items():
        left_out = re.search(rf"left out: {re.escape(name)}: there at {re.escape(version)}\b", result.stderr)
        assert resolved.get(name) == version or left_out, f"{name}=={version} is neither carried nor on the GPU machine"
    assert resolved["transformers"] == "5.24.0"
    for name in ["debugpy", "jedi"]:
        assert resolved[name].endswith("+standin"), f"{name} should be a stand-in: {resolved[name]}"


@pytest.mark.slow
def test_gpu_check_smoke_run_without_a_gpu(tmp_path):
    import torch

    report = tmp_path / "gpu_report.txt"
    result = _run(["bash", CHECK, "--smoke", "--no-install", "--python", sys.executable, "--report", report], 400)
    output = result.stdout + result.stderr
    text = report.read_text()
    assert result.returncode == 0, f"exit {result.returncode}\n{text[-4000:]}"
    if not torch.cuda.is_available():
        assert "no CUDA GPU found: running on CPU" in result.stdout
        assert "no CUDA GPU found: running on CPU" in text
    summary = text[text.index("== SUMMARY"):]
    for phase, status in [("install", "skipped"), ("environment", "ok"), ("package tests", "ok"),
                          ("notebooks (nbval)", "ok"), ("benchmark", "skipped")]:
        assert re.search(rf"^{re.escape(phase)}\s+{status}\b", summary, re.M), f"{phase} not {status}:\n{summary}"
    assert re.search(r"^package tests\s+ok.*\d+ passed", summary, re.M)
    assert "overall: PASSED" in summary and "overall: PASSED" in output
    assert "transformers" in text and "pick_device() -> " in text  # the environment phase's versions


@pytest.mark.slow
def test_gpu_check_fails_when_a_phase_cannot_run(tmp_path):
    report = tmp_path / "gpu_report.txt"
    result = _run(["bash", CHECK, "--smoke", "--no-install", "--budget", "1", "--python", sys.executable,
                   "--report", report], 120)
    assert result.returncode == 1, result.stdout + result.stderr
    text = report.read_text()
    assert re.search(r"^environment\s+NOT RUN", text, re.M) and "overall: FAILED" in text
