"""What a matplotlib figure writes, for the tests of figures drawn per edition (issue #23)."""
import re


def figure_texts(fig) -> list[str]:
    """Every non-empty text a figure draws: titles, axis and tick labels, legends,
    annotations, the colour bar's label."""
    from matplotlib.text import Text
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def english_words(texts, kept=("token",)) -> set[str]:
    """The Latin-letter words of `texts`, less those the Chinese edition keeps (`kept`:
    'token' and the model's name, terms.tsv)."""
    return {w for t in texts for w in re.findall(r"[A-Za-z]+", t)} - set(kept)
