"""minimind.export: a MiniMind checkpoint becomes a folder that stock transformers loads as Qwen3, same logits."""
import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM, Qwen3MoeForCausalLM

from minimind import load_pretrained, load_tokenizer
from minimind.checkpoint import SHIPPED
from minimind import export as export_module
from minimind.export import ROUNDING_BOUND, export, main, max_logit_difference
from cli_helpers import deny_writes, error_line, files

TOL = 1e-5  # fp32 rounding of two implementations (measured 0 to 5.7e-6, CPU-dependent)
SHIPPED_CASES = [("poetry-dense", Qwen3ForCausalLM), ("poetry-moe", Qwen3MoeForCausalLM)]


@pytest.mark.parametrize("name, cls", SHIPPED_CASES)
def test_shipped_checkpoints_export_to_stock_qwen3(tmp_path, name, cls):
    out = export(name, tmp_path / name)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [cls.__name__] and "auto_map" not in config  # no custom code
    assert type(AutoModelForCausalLM.from_pretrained(out)) is cls
    delta = max_logit_difference(name, out)
    assert delta <= TOL, f"max |Δlogits| = {delta:.2e}"
    theirs, ours = AutoTokenizer.from_pretrained(out), load_tokenizer(name)
    line = "床前明月光，"
    assert theirs(line).input_ids == ours(line).input_ids  # the same file: exact
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (1, 2, 0)
    assert TOL < ROUNDING_BOUND  # the CLI's verdict is looser than this test


def yarn_folder(tmp_path):
    """poetry-dense's weights with YaRN switched on (x4 beyond its 2048 trained positions)."""
    folder = tmp_path / "poetry-dense-yarn"
    shutil.copytree(SHIPPED / "poetry-dense", folder)
    (folder / "SHA256SUMS").unlink()
    config = json.loads((folder / "config.json").read_text())
    config.update(max_position_embeddings=8192,
                  inference_rope_scaling={"factor": 4, "original_max_position_embeddings": 2048})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_yarn_settings_export(tmp_path):
    folder = yarn_folder(tmp_path)
    out = export(folder, tmp_path / "out")
    rope = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert rope["rope_type"] == "yarn" and rope["factor"] == 4 and rope["original_max_position_embeddings"] == 2048
    delta = max_logit_difference(folder, out, seq_len=512)
    assert delta <= TOL, f"max |Δlogits| = {delta:.2e}"
    ids = torch.arange(3, 515)[None]
    with torch.no_grad():  # without YaRN the logits differ by far more than rounding
        assert (load_pretrained(folder)(ids).logits - load_pretrained("poetry-dense")(ids).logits).abs().max() > 0.1


def damaged(tmp_path, name, data: bytes):
    """poetry-dense copied without its checksums, with one file replaced by `data`."""
    folder = shutil.copytree(SHIPPED / "poetry-dense", tmp_path / "src")
    (folder / "SHA256SUMS").unlink()
    (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("name, data, message", [
    (None, None, "nope: no checkpoint folder 'nope'; shipped checkpoints"),
    ("tokenizer.json", b'{"model": ', "{src}/tokenizer.json: not valid JSON ("),
    ("config.json", b"{", "{src}/config.json: not valid JSON ("),
    ("model.safetensors", b"\0" * 16, "{src}/model.safetensors: cannot be read ("),
])
def test_cli_source_errors_name_the_file(tmp_path, capsys, name, data, message):
    src = damaged(tmp_path, name, data) if name else "nope"
    line = error_line(capsys, main, [src, tmp_path / "out"])
    assert line.startswith("error: " + message.format(src=src)), line
    assert not (tmp_path / "out").exists()


def test_cli_never_overwrites(tmp_path, capsys):
    out, notes = tmp_path / "out", tmp_path / "notes.txt"
    out.mkdir()
    (out / "config.json").write_text("{}")
    line = error_line(capsys, main, ["poetry-dense", out])
    assert line == (f"error: {out}: exists and is not empty (config.json); "
                    "choose a new folder")
    assert files(out) == {"config.json": b"{}"}
    notes.write_text("mine")
    line = error_line(capsys, main, ["poetry-dense", notes])
    assert line == f"error: {notes}: is a file, not a folder; choose a new folder"
    assert notes.read_text() == "mine"


def test_cli_refuses_a_folder_it_cannot_write(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    deny_writes(monkeypatch, locked)
    line = error_line(capsys, main, ["poetry-dense", locked / "out"])
    assert line == (f"error: {locked / 'out'}: cannot write in {locked} "
                    "(permission denied); choose another folder")


CHECK = "max |Δlogits| vs MiniMind (fp32, 2 x 64 random tokens)"


def test_cli_prints_a_verdict_not_rounding_noise(tmp_path, capsys):
    main(["poetry-dense", str(tmp_path / "out")])
    assert capsys.readouterr().out == (
        f"wrote {tmp_path / 'out'}: Qwen3ForCausalLM, tokenizer included, {CHECK} "
        "≤ 1e-4: equal up to float32 rounding\n")


def test_cli_fails_in_one_line_when_the_logits_differ(tmp_path, capsys, monkeypatch):
    broken = lambda src, out: 0.25  # noqa: E731 (as a wrong export would measure)
    monkeypatch.setattr(export_module, "max_logit_difference", broken)
    with pytest.raises(SystemExit) as exit_info:
        main(["poetry-dense", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1 and captured.out == ""
    assert captured.err == (f"error: {tmp_path / 'out'}: {CHECK} = 2.5e-01, above the "
                            "1e-4 of float32 rounding: the export does not reproduce "
                            "the model; please report it\n")


STOCK = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
assert not any(name.startswith("minimind") for name in sys.modules)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
ids = tokenizer("<|im_start|>床前明月光，", return_tensors="pt").input_ids
print(model.generate(ids, max_new_tokens=16, do_sample=False)[0].tolist())
assert not any(name.startswith("minimind") for name in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["poetry-dense", "poetry-moe"])
def test_cli_export_serves_in_a_process_without_minimind(tmp_path, name):
    run = subprocess.run([sys.executable, "-m", "minimind.export", name, str(tmp_path / "out")],
                         capture_output=True, text=True, check=True)
    assert run.stdout.endswith("≤ 1e-4: equal up to float32 rounding\n"), run.stdout
    stock = subprocess.run([sys.executable, "-c", STOCK, str(tmp_path / "out")], capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    tokenizer, model = load_tokenizer(name), load_pretrained(name)
    ids = tokenizer("<|im_start|>床前明月光，", return_tensors="pt").input_ids
    greedy = model.generate(ids, max_new_tokens=16, do_sample=False)[0]
    with torch.no_grad():
        top2 = model(greedy[None, :-1]).logits[0, ids.shape[1] - 1:].topk(2).values
    # exact tokens are fair: fp32 logits agree to TOL, every step's lead is far larger
    assert (top2[:, 0] - top2[:, 1]).min() > 100 * TOL
    assert stock.stdout.strip() == str(greedy.tolist())


@pytest.mark.slow
def test_cli_user_error_exits_non_zero_with_one_line(tmp_path):
    failed = subprocess.run([sys.executable, "-m", "minimind.export", "nope", str(tmp_path / "x")],
                            capture_output=True, text=True)
    assert failed.returncode == 2 and failed.stdout == ""
    assert failed.stderr.count("\n") == 1
    assert failed.stderr.startswith("error: nope: no checkpoint folder 'nope'")
