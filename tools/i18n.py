"""The Chinese edition (中文版): Sphinx's gettext translation of the book's prose.

Code and outputs are shared by both editions; the prose (markdown cells, .md pages,
toc captions) is translated, one catalogue per page in
book/locales/zh_CN/LC_MESSAGES/book/*.po, and the widgets' text (descriptions, slider
readouts, captions) with one catalogue, LC_MESSAGES/widgets.po (tools/widget_i18n.py); Sphinx's own
strings that its zh_CN catalogue leaves in English ("Link to this heading") in LC_MESSAGES/sphinx.po.

    python tools/i18n.py update   # after an English change: extract messages, merge them into the catalogues
                                  # (a changed paragraph becomes fuzzy and shows in English until re-translated)
    python tools/i18n.py status   # per catalogue: messages, translated, fuzzy, missing; then `check`.
                                  # Exit 1 unless every catalogue is complete and current (CI runs this)
    python tools/i18n.py check [PO ...]   # markup and terminology of the translations (see check_entry)
    python tools/i18n.py build    # the Chinese edition into _build/html/zh (after the
                                  # English one), widget state translated (widgets.po)

The Chinese config is _config.yml with book/locales/zh_CN/_config.override.yml merged over it. Terms and
their fixed translations: book/locales/zh_CN/terms.tsv (also the search dictionary for jieba).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml
from babel.messages.pofile import read_po
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

REPO = Path(__file__).resolve().parents[1]
LOCALE = "zh_CN"
LOCALE_DIR = REPO / "book" / "locales"
PO_DIR = LOCALE_DIR / LOCALE / "LC_MESSAGES"
OVERRIDE = LOCALE_DIR / LOCALE / "_config.override.yml"
TERMS = LOCALE_DIR / LOCALE / "terms.tsv"
ZH_BUILD = REPO / "_build" / "zh"  # the Chinese build's own folder (config, doctrees, html)
HTML_OUT = REPO / "_build" / "html" / "zh"
WIDGETS_PO = PO_DIR / "widgets.po"  # the widgets' strings (tools/widget_i18n.py)
SPHINX_PO = PO_DIR / "sphinx.po"  # Sphinx's own strings its zh_CN catalogue leaves out ("Link to this
#                                   heading"): Sphinx reads the user's locale_dirs for them first


# --- configuration ------------------------------------------------------------------------------------------

def merge(base: dict, override: dict) -> dict:
    """Deep merge: dicts merge key by key, anything else in `override` replaces."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def write_config(folder: Path, zh: bool) -> Path:
    """_config.yml (merged with the Chinese override when `zh`) written into `folder`, paths made absolute
    (Jupyter Book resolves local extensions relative to the config file)."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    if zh:
        config = merge(config, yaml.safe_load(OVERRIDE.read_text(encoding="utf-8")))
        dictionary = folder / "jieba_terms.txt"
        dictionary.write_text("".join(f"{word} 100000 n\n" for word in search_words()), encoding="utf-8")
        config["sphinx"]["config"]["html_search_options"] = {"dict": str(dictionary)}
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {k: str(REPO / v) for k, v in sphinx["local_extensions"].items()}
    sphinx["config"]["locale_dirs"] = [str(REPO / d) for d in sphinx["config"]["locale_dirs"]]
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def jupyter_book(config: Path, out: Path, *args: str) -> None:
    cmd = ["jupyter-book", "build", str(REPO), "--config", str(config), "--path-output", str(out), *args]
    subprocess.run(cmd, check=True)


# --- extract / update ---------------------------------------------------------------------------------------

def extract(out: Path) -> Path:
    """Message templates (.pot) of the current English sources; returns the folder holding book/*.pot."""
    out.mkdir(parents=True, exist_ok=True)
    jupyter_book(write_config(out, zh=False), out, "--builder", "custom", "--custom-builder", "gettext", "-W", "-q")
    return out / "_build" / "gettext"


def update() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pot_dir = extract(Path(tmp))
        subprocess.run(["sphinx-intl", "update", "-p", str(pot_dir), "-d", str(LOCALE_DIR), "-l", LOCALE,
                        "--line-width", "-1"], check=True)
    import widget_i18n  # widgets.po, merged from the notebooks' widget state
    widget_i18n.update()
    print(f"catalogues updated in {PO_DIR.relative_to(REPO)}; now: python tools/i18n.py status")


# --- terms --------------------------------------------------------------------------------------------------

@dataclass
class Term:
    english: str   # a case-insensitive regex matched as whole words, e.g. "residual streams?"
    chinese: str   # the fixed translation; alternatives separated by "|" (the first is the preferred one)
    rule: str      # "always": every message with the English has the Chinese; "first": only first-use;
                   # "note": guidance for translators, not checked

    @property
    def english_re(self) -> re.Pattern:
        return re.compile(rf"(?<![\w-])(?:{self.english})(?![\w-])", re.IGNORECASE)

    @property
    def chinese_forms(self) -> list[str]:
        return [form for form in self.chinese.split("|") if form]

    def in_chinese(self, text: str) -> bool:
        return any(form in text for form in self.chinese_forms)


def search_words() -> list[str]:
    """The Chinese terms as jieba dictionary words (all-Chinese forms only: a dictionary word has no spaces)."""
    words = {form for term in read_terms() for form in term.chinese_forms if re.fullmatch(r"[\u4e00-\u9fff]+", form)}
    return sorted(words)


def read_terms() -> list[Term]:
    terms = []
    for line in TERMS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        english, chinese, rule, *_ = line.split("\t") + [""]
        if rule not in ("always", "first", "note"):
            raise ValueError(f"{TERMS.name}: rule must be always, first or note, not {rule!r} in {line!r}")
        terms.append(Term(english, chinese, rule))
    return terms


# --- markup -------------------------------------------------------------------------------------------------

_md = MarkdownIt("commonmark").use(dollarmath_plugin, allow_labels=True, allow_space=True, allow_digits=True)
_TEXT_IN_MATH = re.compile(r"\\(?:text|mathrm|textrm)\{[^{}]*\}")
_STRAY = ("*", "$", "`")


@dataclass
class Markup:
    code: Counter    # inline code and roles: must be copied exactly
    math: Counter    # math, with \text{...} contents blanked (they may be translated)
    links: Counter   # link targets
    stray: Counter   # markup characters left as literal text (an emphasis or `$` that failed to parse)
    prose: str       # the text without code, math and link targets


def markup(text: str) -> Markup:
    code, math, links, stray, prose = Counter(), Counter(), Counter(), Counter(), []
    for token in _md.parse(text):
        if token.type in ("math_block", "math_block_label", "fence", "code_block"):
            (math if token.type.startswith("math") else code)[token.content.strip()] += 1
        for child in token.children or []:
            if child.type == "code_inline":
                code[child.content] += 1
            elif child.type.startswith("math"):
                math[_TEXT_IN_MATH.sub(r"\\text{}", child.content.strip())] += 1
            elif child.type == "link_open":
                links[child.attrs.get("href", "")] += 1
            elif child.type == "text":
                prose.append(child.content)
                for char in _STRAY:
                    stray[char] += child.content.count(char)
    return Markup(code, math, links, stray, " ".join(prose))


def is_display_math(msgid: str) -> bool:
    """A `$$` block's message is its bare LaTeX (no dollars): LaTeX commands in what parses as prose."""
    return bool(re.search(r"\\[A-Za-z]{2,}", markup(msgid).prose))


def _one_paragraph(text: str) -> bool:
    """Sphinx parses a translation again and uses it only if it is a single paragraph (or literal/math)."""
    blocks = [t.type for t in _md.parse(text) if t.level == 0 and t.nesting >= 0]
    return blocks in (["paragraph_open"], ["math_block"], ["math_block_label"])


_ENGLISH_WORDS = re.compile(r"\b(the|of|and|is|are|to|in|with|that|this|it|a|an)\b", re.IGNORECASE)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def check_entry(msgid: str, msgstr: str) -> list[str]:
    """What is wrong with one translation's markup: code, math and links must match the English; no markup
    may be left as literal text (CommonMark does not close `**` between a CJK punctuation mark and a
    letter: write `**“残差流”** 是` or move the quotes inside); no sentence left in English."""
    problems = []
    if is_display_math(msgid):
        same = _TEXT_IN_MATH.sub("", msgid).split() == _TEXT_IN_MATH.sub("", msgstr).split()
        return [] if same else ["display math changed (only \\text{...} contents may be translated)"]
    src, dst = markup(msgid), markup(msgstr)
    for name in ("code", "math", "links"):
        a, b = getattr(src, name), getattr(dst, name)
        if a != b:
            lost, added = sorted((a - b).elements()), sorted((b - a).elements())
            problems.append(f"{name} differs: missing {lost}, extra {added}")
    for char in _STRAY:
        if dst.stray[char] > src.stray[char]:
            problems.append(f"a literal {char!r} in the rendered text: markup that did not parse")
    if msgstr.strip() != msgid.strip() and not _one_paragraph(msgstr):
        problems.append("does not parse as one paragraph, so Sphinx silently keeps the English (a heading "
                        "like `1. 先测量` is a numbered list: write `1\\. 先测量`)")
    if msgstr.strip() == msgid.strip() and len(_ENGLISH_WORDS.findall(src.prose)) >= 2:
        problems.append("left in English")
    if _CJK.search(msgstr) is None and len(_ENGLISH_WORDS.findall(dst.prose)) >= 2:
        problems.append("no Chinese in the translation")
    return problems


_TAGS = re.compile(r"<[^>]*>")
_NUMBERS = re.compile(r"\d+(?:[.,]\d+)*")
_ENTITIES = re.compile(r"&#?\w+;")  # &#x27; is a quote, not the number 27
_CJK_CHARS = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def check_widget_entry(msgid: str, msgstr: str) -> list[str]:
    """A widget string (widgets.po, issue #23): plain text or a caption's HTML, shown
    as it is, so check_entry's Markdown checks (code, math, links, literal markup, one
    paragraph) do not apply. The HTML tags, the numbers and the Chinese characters
    quoted (金, ，) are copied exactly; no sentence is left in English (a label such as
    `top-k = 5` may stay as it is)."""
    problems = []
    for name, pattern in (("HTML tags", _TAGS), ("numbers", _NUMBERS)):
        a, b = (Counter(pattern.findall(_ENTITIES.sub("", text))) for text in (msgid, msgstr))
        if a != b:
            problems.append(f"{name} differ: missing {sorted((a - b).elements())}, "
                            f"extra {sorted((b - a).elements())}")
    lost = Counter(_CJK_CHARS.findall(msgid)) - Counter(_CJK_CHARS.findall(msgstr))
    if lost:
        problems.append(f"characters of the English missing: {sorted(lost.elements())}")
    words = len(_ENGLISH_WORDS.findall(_TAGS.sub(" ", msgstr)))
    if msgstr.strip() == msgid.strip() and words >= 2:
        problems.append("left in English")
    elif _CJK.search(msgstr) is None and words >= 2:
        problems.append("no Chinese in the translation")
    return problems


_FULL_WIDTH = "，。、：；！？（）《》「」『』“”【】"
_SPACED = re.compile(rf"[{_FULL_WIDTH}]\*{{0,2}} +(?=\S)|(?<=\S) +[{_FULL_WIDTH}]")
_CODE_OR_MATH = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$")


def check_spacing(msgstr: str) -> list[str]:
    """No ASCII space next to full-width punctuation (issue #23, item 10): not after it
    (`第 3 步：…。** 从`, `（ 第 4 章 ）`), not before it (`嵌入 。`). Inline code and math
    count as text here (`， $x$` is flagged too); HTML tags are left out. A bold
    lead-in that ends in a full-width mark is written `**第 3 步**。从…`: CommonMark does
    not close `**` between `。` and a letter, which is why a space crept in."""
    if not _CJK.search(msgstr):
        return []
    text = _TAGS.sub("", _CODE_OR_MATH.sub("X", msgstr))
    return [f"a space next to full-width punctuation: {text[max(0, m.start() - 8):m.end() + 8]!r}"
            for m in _SPACED.finditer(text)]


_PINYIN = re.compile(r"[\w'’]*[āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ][\w'’]*")


def check_pinyin(msgstr: str) -> list[str]:
    """A chapter's prose carries no pinyin (issue #23, item 1): a Chinese reader needs
    no 玉（yù，jade）. The glossary keeps its readings on purpose and is not checked. Code,
    math and link targets are left out; a name with an accent (Poincaré) would be
    flagged too, and none is in the book."""
    prose = markup(msgstr).prose
    return [f"pinyin in a chapter's prose: {word!r}" for word in _PINYIN.findall(prose)]


_GLOSS = re.compile(r"（[^（）]*[A-Za-z][^（）]*）")  # （grouped-query attention，GQA）
_CHAPTER_DASH = re.compile(r"^(第 \S+ 章) — ")


def check_heading(msgstr: str) -> list[str]:
    """A heading is a title in the sidebar, the tab and search hits: no English gloss (the first use in
    the prose gives it), and 第 4a 章　注意力 rather than an English dash."""
    problems = []
    if _GLOSS.search(msgstr):
        problems.append(f"a heading carries an English gloss {_GLOSS.search(msgstr)[0]}: give it in the "
                        "first paragraph that uses the term")
    if _CHAPTER_DASH.search(msgstr):
        problems.append("a chapter title is written 第 N 章 — …: use a full-width space, 第 N 章　…")
    return problems


def heading_texts(po: Path) -> set[str]:
    """The headings of the page a catalogue translates (its notebook's or .md's `#` lines)."""
    stem = REPO / "book" / po.relative_to(PO_DIR / "book").with_suffix("")
    for source in (stem.with_suffix(".ipynb"), stem.with_suffix(".md")):
        if source.suffix == ".ipynb" and source.exists():
            import nbformat
            texts = [c.source for c in nbformat.read(source, 4).cells if c.cell_type == "markdown"]
            break
        if source.exists():
            texts = [source.read_text(encoding="utf-8")]
            break
    else:
        return set()
    return {m[1].strip() for text in texts for m in re.finditer(r"(?m)^#{1,6}\s+(.+)$", text)}


def check_terms(entries: list[tuple[str, str]], terms: list[Term], headings=frozenset(),
                first_use: bool = True) -> list[str]:
    """Fixed terms: an `always` term's Chinese appears wherever its English does; for `always` and `first`
    terms the first message (in page order) using the term gives the English in parentheses as well.
    Not with `first_use=False` (widgets.po: no page; its strings sit by glossed prose).
    Headings (`headings`: their English) are not a first use: they carry no gloss (check_heading)."""
    problems = []
    for term in terms:
        if term.rule == "note":
            continue
        first_seen = False
        for msgid, msgstr in entries:
            if is_display_math(msgid) or msgid.strip() in headings:
                continue
            english_in_source = bool(term.english_re.search(markup(msgid).prose))
            if term.rule == "always" and english_in_source and not term.in_chinese(msgstr):
                problems.append(f"{msgid[:60]!r}: {term.english!r} should be {term.chinese_forms[0]!r}")
            own = _without_longer_terms(msgstr, term, terms)
            used = term.in_chinese(own) or (term.rule == "first" and bool(term.english_re.search(markup(own).prose)))
            if used and not first_seen and first_use:
                first_seen = True
                both = term.in_chinese(own) and _gives_english(own, term, terms)
                if not both:
                    problems.append(f"{msgid[:60]!r}: the first use of {term.chinese_forms[0]} gives the English "
                                    f"({term.english}) as well")
    return problems


def _without_longer_terms(text: str, term: Term, terms: list[Term]) -> str:
    """`text` without the Chinese of longer terms that contain `term`'s (旋转位置编码 is not a use of 位置编码)."""
    for other in terms:
        if any(mine in form and mine != form for form in other.chinese_forms for mine in term.chinese_forms):
            text = other.english_re.sub("", text)
            for form in other.chinese_forms:
                text = text.replace(form, "")
    return text


def _gives_english(text: str, term: Term, terms: list[Term]) -> bool:
    """The English of `term`, or of a synonym with the same Chinese (RoPE / rotary position embedding)."""
    synonyms = [t for t in terms if set(t.chinese_forms) & set(term.chinese_forms)]
    return any(t.english_re.search(text) for t in synonyms)


def catalogue_entries(po: Path) -> list:
    with po.open("rb") as f:
        catalog = read_po(f)
    return [m for m in catalog if m.id]


def check_widgets(po: Path, terms: list[Term]) -> list[str]:
    """widgets.po: check_widget_entry, and the `always` terms (a label such as 温度
    carries no English gloss, so the first-use rule is skipped; no headings either)."""
    entries = [(m.id, m.string) for m in catalogue_entries(po)
               if m.string and not m.fuzzy]
    problems = [f"{msgid[:60]!r}: {p}" for msgid, msgstr in entries
                for p in check_widget_entry(msgid, msgstr) + check_spacing(msgstr)]
    return problems + check_terms(entries, terms, first_use=False)


def check_typography(entries: list[tuple[str, str]], pinyin: bool) -> list[str]:
    """check_spacing on every prose message, and check_pinyin where `pinyin` (every
    catalogue but the glossary's); display math is LaTeX, not prose."""
    prose = [(msgid, msgstr) for msgid, msgstr in entries if not is_display_math(msgid)]
    return [f"{msgid[:60]!r}: {p}" for msgid, msgstr in prose
            for p in check_spacing(msgstr) + (check_pinyin(msgstr) if pinyin else [])]


def check(paths: list[Path]) -> int:
    terms = read_terms()
    count = 0
    for po in paths:
        if po == WIDGETS_PO:
            problems = check_widgets(po, terms)
            for p in problems:
                print(f"{po.relative_to(REPO)}: {p}")
            count += len(problems)
            continue
        entries = [(m.id, m.string) for m in catalogue_entries(po) if m.string and not m.fuzzy]
        problems = [f"{msgid[:60]!r}: {p}" for msgid, msgstr in entries for p in check_entry(msgid, msgstr)]
        headings = heading_texts(po) if po.is_relative_to(PO_DIR / "book") else set()
        problems += [f"{msgid[:60]!r}: {p}" for msgid, msgstr in entries if msgid.strip() in headings
                     for p in check_heading(msgstr)]
        if po.stem != "glossary":  # the glossary's table keeps the English terms as they are
            problems += check_terms(entries, terms, headings)
        problems += check_typography(entries, pinyin=po.stem != "glossary")
        for p in problems:
            print(f"{po.relative_to(REPO)}: {p}")
        count += len(problems)
    print(f"check: {count} problem(s) in {len(paths)} catalogue(s)")
    return count


# --- status -------------------------------------------------------------------------------------------------

def widget_status() -> int:
    """widgets.po's row of the status table, counted like a page: the strings of the
    notebooks' widget state are its messages. Returns how many are not translated."""
    import widget_i18n
    from refresh_notebooks import toc_notebooks
    wanted = set(widget_i18n.book_strings(toc_notebooks(REPO / "_toc.yml")))
    catalogue = catalogue_entries(WIDGETS_PO) if WIDGETS_PO.exists() else []
    have = {m.id: m for m in catalogue}
    done = sum(1 for i in wanted if i in have and have[i].string and not have[i].fuzzy)
    fuzzy = sum(1 for i in wanted if i in have and have[i].fuzzy)
    empty = sum(1 for i in wanted if i in have and not have[i].string)
    missing = len(wanted - have.keys())
    stale = len(have.keys() - wanted)  # shown no more: `update` removes them
    print(f"{'widgets':<28}{len(wanted):>9}{done:>7}{fuzzy:>7}{empty:>7}{missing:>12}"
          + (f"  ({stale} no longer shown)" if stale else ""))
    return len(wanted) - done


def status() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pot_dir = extract(Path(tmp))
        pots = {p.relative_to(pot_dir).with_suffix(""): p for p in sorted(pot_dir.rglob("*.pot"))}
        bad = 0
        print(f"{'catalogue':<28}{'messages':>9}{'done':>7}{'fuzzy':>7}{'empty':>7}{'not in .po':>12}")
        for name, pot in pots.items():
            wanted = {m.id for m in catalogue_entries(pot)}
            po = PO_DIR / name.with_suffix(".po")
            have = {m.id: m for m in catalogue_entries(po)} if po.exists() else {}
            done = sum(1 for i in wanted if i in have and have[i].string and not have[i].fuzzy)
            fuzzy = sum(1 for i in wanted if i in have and have[i].fuzzy)
            empty = sum(1 for i in wanted if i in have and not have[i].string)
            missing = len(wanted - have.keys())
            bad += len(wanted) - done
            print(f"{str(name):<28}{len(wanted):>9}{done:>7}{fuzzy:>7}{empty:>7}{missing:>12}")
        bad += widget_status()
        pages = {PO_DIR / name.with_suffix(".po") for name in pots} | {WIDGETS_PO, SPHINX_PO}
        orphans = sorted(set(PO_DIR.rglob("*.po")) - pages)
        for po in orphans:
            print(f"{po.relative_to(REPO)}: no such page any more (delete it)")
    if bad:
        print(f"status: {bad} message(s) not translated or out of date: python tools/i18n.py update, then "
              "translate the empty and fuzzy entries")
    problems = check(sorted(PO_DIR.rglob("*.po")))
    return 1 if bad or orphans or problems else 0


# --- build --------------------------------------------------------------------------------------------------

def build(extra: list[str]) -> None:
    """The Chinese edition, warnings as errors (a translation that breaks a reference only warns)."""
    ZH_BUILD.mkdir(parents=True, exist_ok=True)
    jupyter_book(write_config(ZH_BUILD, zh=True), ZH_BUILD, "-W", "--keep-going", *extra)
    if HTML_OUT.exists():
        shutil.rmtree(HTML_OUT)
    shutil.copytree(ZH_BUILD / "_build" / "html", HTML_OUT)
    from zh_notebooks import write_sources  # each page's download button: its Chinese notebook
    write_sources(HTML_OUT)
    import widget_i18n  # every page's embedded widget state, translated with widgets.po
    for page, lost in widget_i18n.write_html(HTML_OUT).items():
        if lost:
            where = page.relative_to(REPO)
            print(f"{where}: {len(lost)} widget string(s) in English: {lost[0]}")
    print(HTML_OUT / "index.html")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("update")
    sub.add_parser("status")
    check_parser = sub.add_parser("check")
    check_parser.add_argument("po", nargs="*", type=Path)
    sub.add_parser("build", help="more options are passed to jupyter-book build, e.g. --all")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "build":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "update":
        update()
    elif args.command == "status":
        return status()
    elif args.command == "check":
        paths = [p.resolve() for p in args.po] or sorted(PO_DIR.rglob("*.po"))
        return 1 if check(paths) else 0
    elif args.command == "build":
        build(extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
