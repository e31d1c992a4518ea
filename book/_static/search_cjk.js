/* Chinese queries for Sphinx's search page: segment what the reader types into the index's words.
 *
 * The Chinese edition's index holds jieba's words (tools/i18n.py gives jieba the book's terms), but
 * Sphinx's query splitter cuts only at spaces and punctuation: 预填充 or KV缓存 stays one term that is
 * in no page, so it found nothing. Loaded before searchtools.js, this splitter replaces Sphinx's default
 * (searchtools.js keeps a `splitQuery` that is already defined): it splits where Latin letters meet
 * Chinese characters, keeps a Chinese run that is an index word, and otherwise cuts the run into the
 * fewest index words that cover it; a character left over is covered by an index word overlapping its
 * neighbours (预填充 -> 预填, 填充), or dropped if no index word holds it.
 * Pages without Chinese queries see Sphinx's behaviour unchanged. Tested by tests/test_search_cjk.py and
 * the browser test's searches.
 */
"use strict";

var splitQuery = (function () {
  const WORD = /[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu; // Sphinx's own splitter
  const SCRIPT_RUN = /\p{Script=Han}+|[^\p{Script=Han}]+/gu;
  const HAN = /\p{Script=Han}/u;
  const LONGEST = 12; // longer index words are not tried as pieces

  function indexHas(word) {
    const index = (typeof Search !== "undefined" && Search._index) || null;
    if (!index) return false;
    const key = word.toLowerCase();
    return Object.prototype.hasOwnProperty.call(index.terms, key) ||
      Object.prototype.hasOwnProperty.call(index.titleterms, key);
  }

  // The fewest index words covering `run`; a character no word covers costs more than any word.
  function segment(run, has) {
    const chars = Array.from(run);
    const n = chars.length;
    const cost = new Array(n + 1).fill(Infinity);
    const back = new Array(n + 1).fill(null);
    cost[0] = 0;
    for (let end = 1; end <= n; end++) {
      for (let start = Math.max(0, end - LONGEST); start < end; start++) {
        const piece = chars.slice(start, end).join("");
        const known = has(piece);
        if (!known && end - start > 1) continue;
        const step = known ? 1 : n + 1; // an unknown single character: dropped, at a high cost
        if (cost[start] + step < cost[end]) {
          cost[end] = cost[start] + step;
          back[end] = { start, piece, known };
        }
      }
    }
    const pieces = [];
    for (let end = n; end > 0; end = back[end].start) {
      const { start, piece, known } = back[end];
      const cover = known ? piece : overlapping(chars, start, has);
      if (cover && !pieces.includes(cover)) pieces.unshift(cover);
    }
    return pieces;
  }

  // The longest index word that holds chars[at] and overlaps its neighbours (填充 for 充 in 预填充).
  function overlapping(chars, at, has) {
    for (let length = Math.min(LONGEST, chars.length); length > 1; length--) {
      for (let start = Math.max(0, at - length + 1); start <= at; start++) {
        const piece = chars.slice(start, start + length).join("");
        if (start + length <= chars.length && has(piece)) return piece;
      }
    }
    return null;
  }

  function split(query, has = indexHas) {
    const terms = [];
    for (const word of query.split(WORD).filter((term) => term)) {
      if (!HAN.test(word)) {
        terms.push(word);
        continue;
      }
      for (const run of word.match(SCRIPT_RUN)) {
        if (!HAN.test(run) || has(run)) terms.push(run);
        else terms.push(...segment(run, has));
      }
    }
    return terms;
  }

  split.segment = segment;
  return split;
})();

if (typeof module !== "undefined") module.exports = splitQuery; // for tests/test_search_cjk.py
