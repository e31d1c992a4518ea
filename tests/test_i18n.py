"""The Chinese edition's tooling (tools/i18n.py, book/_ext/editions.py) and its catalogues.

The slow test runs `python tools/i18n.py status`: every page's catalogue complete (no empty or fuzzy
message), current with the English sources, and passing the markup and terminology checks.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import jieba
import pytest
from babel.messages.catalog import Catalog
from babel.messages.mofile import read_mo, write_mo
from sphinx_intl.catalog import update_with_fuzzy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "book" / "_ext"))
import editions  # noqa: E402
import i18n  # noqa: E402

SOURCE = ("**Forgetting the shift** (silent): scoring position $t$ against the token at $t$, not $t+1$; "
          "see `shifted_cross_entropy` and [Chapter 9](ch09_loss.ipynb).")
GOOD = "**忘记移位**（静默）：把位置 $t$ 与 $t$ 处的 token 比较，而不是 $t+1$；见 `shifted_cross_entropy` 与[第 9 章](ch09_loss.ipynb)。"


def test_a_faithful_translation_passes():
    assert i18n.check_entry(SOURCE, GOOD) == []


@pytest.mark.parametrize("broken, problem", [
    (GOOD.replace("`shifted_cross_entropy`", "`shifted_loss`"), "code differs"),
    (GOOD.replace("$t+1$", "$t + 2$"), "math differs"),
    (GOOD.replace("ch09_loss.ipynb", "ch09.ipynb"), "links differs"),
    (GOOD.replace("$t+1$", "$t+1"), "a literal '$'"),                        # unbalanced dollar
    (GOOD.replace("**忘记移位**（静默）", "这是**“忘记移位”**的错误"), "a literal '*'"),  # CJK emphasis rule
    (SOURCE, "left in English"),
    ("Forgetting the shift is a silent bug of the loss.", "no Chinese"),
    ("1. 忘记移位：把位置 $t$ 与 $t$ 比较，而不是 $t+1$；见 `shifted_cross_entropy` 与[第 9 章](ch09_loss.ipynb)。",
     "one paragraph"),  # a numbered list, which Sphinx would silently replace by the English
])
def test_the_markup_check_catches(broken, problem):
    problems = i18n.check_entry(SOURCE, broken)
    assert any(problem in p for p in problems), problems


def test_math_text_may_be_translated_but_not_the_math():
    source = r"The table is $[\text{end}, 48]$."
    assert i18n.check_entry(source, r"这张表是 $[\text{末尾}, 48]$。") == []
    assert i18n.check_entry(source, r"这张表是 $[\text{末尾}, 96]$。") != []


def test_a_longer_term_is_not_a_use_of_a_shorter_one_and_synonyms_count():
    terms = [i18n.Term("rotary position embeddings?", "旋转位置编码", "always"),
             i18n.Term("position(al)? encodings?", "位置编码", "always"), i18n.Term("RoPE", "旋转位置编码", "first")]
    assert i18n.check_terms([("RoPE rotates.", "旋转位置编码（RoPE）会旋转。")], terms) == []
    assert i18n.check_terms([("RoPE rotates.", "旋转位置编码会旋转。")], terms) != []


def test_terms_always_and_first_use():
    terms = [i18n.Term("residual streams?", "残差流", "always"), i18n.Term("RMSNorm", "均方根归一化", "first")]
    ok = [("The residual stream grows.", "残差流（residual stream）不断变大。"),
          ("RMSNorm divides the residual stream.", "均方根归一化（RMSNorm）除以残差流。"),
          ("RMSNorm again.", "RMSNorm 又一次。")]
    assert i18n.check_terms(ok, terms) == []
    other_word = [ok[0], ("The residual stream again.", "残余的数据流又一次。")]
    assert "should be '残差流'" in i18n.check_terms(other_word, terms)[0]
    no_english_first = [("The residual stream grows.", "残差流不断变大。")]
    assert "first use of 残差流" in i18n.check_terms(no_english_first, terms)[0]


@pytest.mark.parametrize("text, flagged", [
    ("**第 3 步**。从全零矩阵出发", False),
    ("**第 3 步：对掩码后的矩阵做 softmax。** 从全零矩阵出发", True),  # space after 。**
    ("块 0 淹没了嵌入 。", True),  # space before 。
    ("（ 第 4 章）", True),
    ("用 `torch.cat` 追加，损失为 4.965", False),  # spaces around Latin text and numbers are fine
])
def test_the_spacing_check_flags_ascii_spaces_next_to_full_width_punctuation(text, flagged):
    assert bool(i18n.check_spacing(text)) == flagged


def test_the_pinyin_check_flags_tone_marks_outside_code_and_links():
    assert i18n.check_pinyin("模型又想写“金”（jīn，gold），它排第 1")
    assert not i18n.check_pinyin("模型又想写“金”，它排第 1；见 `jīn` 与[第 4a 章](ch04a_attention.ipynb)")


def test_terms_file_is_well_formed():
    terms = i18n.read_terms()
    assert len(terms) >= 30
    for term in terms:
        term.english_re  # compiles
        assert term.chinese_forms, term


def test_search_dictionary_keeps_the_terms_whole():
    words = i18n.search_words()
    assert {"残差流", "旋转位置编码", "均方根归一化"} <= set(words)
    plain = jieba.Tokenizer()
    assert "旋转位置编码" not in plain.lcut_for_search("旋转位置编码")  # why the dictionary is needed
    tokenizer = jieba.Tokenizer()
    for word in words:
        tokenizer.add_word(word, 100000)
    assert "旋转位置编码" in tokenizer.lcut_for_search("把旋转位置编码用在查询上")


def test_a_changed_english_paragraph_falls_back_to_english():
    """sphinx-intl marks the old translation fuzzy; the .mo Sphinx compiles leaves fuzzy ones out."""
    catalog = Catalog(locale="zh_CN")
    catalog.add("The residual stream grows.", "残差流不断变大。")
    template = Catalog()
    template.add("The residual stream grows quickly.")
    update_with_fuzzy(catalog, template)
    [message] = [m for m in catalog if m.id]
    assert message.fuzzy and message.string == "残差流不断变大。"
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)  # as sphinx.util.i18n.CatalogInfo.write_mo does
    buffer.seek(0)
    assert "The residual stream grows quickly." not in read_mo(buffer)


def test_twin_urls():
    assert editions.twin_url("book/ch01_shapes", "zh/") == "../zh/book/ch01_shapes.html"
    assert editions.twin_url("book/ch01_shapes", "../") == "../../book/ch01_shapes.html"
    assert editions.twin_url("search", "zh/") == "zh/search.html"


def test_fold_labels_are_translated_in_the_chinese_edition():
    assert [editions.fold_label_zh(x) for x in ("Hint 1", "Hint 3", "Solution", "Going deeper")] == \
        ["提示 1", "提示 3", "答案", "深入一步"]
    assert editions.fold_label_zh("Show code cell source") == "Show code cell source"  # not a fold label
    raw = '<details class="hint"><summary>Hint 2</summary>'
    assert editions.SUMMARY.sub(lambda m: f"<summary>{editions.fold_label_zh(m[1])}</summary>", raw) \
        == '<details class="hint"><summary>提示 2</summary>'


def test_chinese_config_is_the_english_one_plus_the_override(tmp_path):
    import yaml
    config = yaml.safe_load(i18n.write_config(tmp_path, zh=True).read_text(encoding="utf-8"))
    english = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    sphinx = config["sphinx"]["config"]
    assert sphinx["language"] == "zh_CN" and sphinx["edition_twin"]["lang"] == "en"
    assert Path(sphinx["html_search_options"]["dict"]).is_file()
    assert config["parse"] == english["parse"] and config["execute"] == english["execute"]
    assert sphinx["mathjax_path"] == english["sphinx"]["config"]["mathjax_path"]


@pytest.mark.slow
def test_every_catalogue_is_complete_current_and_clean():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "i18n.py"), "status"],
                            capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
