"""book/_static/search_cjk.js: the Chinese search page's query splitter, run by Node on a small index.

The browser test runs the real search pages (tests/test_browser.py, SEARCHES); this one pins the splitting
rules quickly: a Chinese run that is an index word stays whole, any other is cut into the fewest index words,
Latin letters next to Chinese characters are split off (KV缓存 -> KV, 缓存), a character left over is covered by
an overlapping index word, or dropped when no index word holds it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SPLITTER = Path(__file__).resolve().parents[1] / "book" / "_static" / "search_cjk.js"
TERMS = ["预填", "填充", "静夜", "思", "贪心", "解码", "注意力", "机制", "温度", "采样", "缓存", "kv",
         "残差流", "残差", "流", "词", "嵌入"]
RUN = """
globalThis.Search = {_index: {terms: Object.fromEntries(%s.map((t) => [t, 0])), titleterms: {}}};
const split = require(%s);
console.log(JSON.stringify(JSON.parse(process.argv[1]).map((q) => split(q))));
"""


def split(queries: list[str]) -> list[list[str]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = RUN % (json.dumps(TERMS, ensure_ascii=False), json.dumps(str(SPLITTER)))
    result = subprocess.run([node, "-e", script, json.dumps(queries, ensure_ascii=False)],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_chinese_queries_are_cut_into_index_words():
    queries = ["预填充", "静夜思", "贪心解码", "注意力机制", "温度采样", "KV缓存", "残差流", "词嵌入"]
    assert split(queries) == [split_expected(query) for query in queries]


def split_expected(query: str) -> list[str]:
    return {
        "预填充": ["预填", "填充"],  # 充 alone is in no index word: covered by the overlapping 填充
        "静夜思": ["静夜", "思"],
        "贪心解码": ["贪心", "解码"],
        "注意力机制": ["注意力", "机制"],
        "温度采样": ["温度", "采样"],
        "KV缓存": ["KV", "缓存"],
        "残差流": ["残差流"],        # an index word stays whole (not 残差 + 流)
        "词嵌入": ["词", "嵌入"],
    }[query]


def test_characters_in_no_index_word_are_dropped_and_other_queries_are_sphinxs():
    assert split(["静夜思龘", "RMSNorm eps", "the KV-cache", ""]) == [
        ["静夜", "思"], ["RMSNorm", "eps"], ["the", "KV", "cache"], []]
