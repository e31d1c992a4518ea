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
from minimind.export import export, main, max_logit_difference

TOL = 1e-5
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
    assert theirs("床前明月光，").input_ids == ours("床前明月光，").input_ids
    generation = json.loads((out / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (1, 2, 0)


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
    with torch.no_grad():  # the setting matters: without YaRN the logits differ
        assert (load_pretrained(folder)(ids).logits - load_pretrained("poetry-dense")(ids).logits).abs().max() > 0.1


@pytest.mark.parametrize("argv, message", [
    (["nope", "{tmp}/out"], "error: no checkpoint folder 'nope'; shipped checkpoints"),
    (["poetry-dense", "{tmp}"], "error: {tmp} exists and is not empty; choose a new folder"),
])
def test_cli_user_errors_are_one_line(tmp_path, argv, message):
    (tmp_path / "taken.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        main([a.format(tmp=tmp_path) for a in argv])
    assert str(exit_.value.code).startswith(message.format(tmp=tmp_path)) and "\n" not in str(exit_.value.code)


STOCK = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
assert not any(name.startswith("minimind") for name in sys.modules)
model, tokenizer = AutoModelForCausalLM.from_pretrained(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[1])
ids = tokenizer("<|im_start|>床前明月光，", return_tensors="pt").input_ids
print(model.generate(ids, max_new_tokens=16, do_sample=False)[0].tolist())
assert not any(name.startswith("minimind") for name in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["poetry-dense", "poetry-moe"])
def test_cli_export_serves_in_a_process_without_minimind(tmp_path, name):
    run = subprocess.run([sys.executable, "-m", "minimind.export", name, str(tmp_path / "out")],
                         capture_output=True, text=True, check=True)
    assert "max |Δlogits| vs MiniMind = 0.0e+00" in run.stdout, run.stdout
    stock = subprocess.run([sys.executable, "-c", STOCK, str(tmp_path / "out")], capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    tokenizer, model = load_tokenizer(name), load_pretrained(name, dtype=torch.bfloat16)  # as exported
    ids = tokenizer("<|im_start|>床前明月光，", return_tensors="pt").input_ids
    assert stock.stdout.strip() == str(model.generate(ids, max_new_tokens=16, do_sample=False)[0].tolist())


@pytest.mark.slow
def test_cli_user_error_exits_non_zero_with_one_line(tmp_path):
    failed = subprocess.run([sys.executable, "-m", "minimind.export", "nope", str(tmp_path / "x")],
                            capture_output=True, text=True)
    assert failed.returncode != 0 and failed.stdout == ""
    assert failed.stderr.startswith("error: no checkpoint folder 'nope'") and failed.stderr.count("\n") == 1
